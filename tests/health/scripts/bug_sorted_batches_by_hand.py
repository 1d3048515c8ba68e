"""Bug: batches sliced by hand, in order, from tensors stored class by class (no DataLoader,
no permutation): each batch holds one class, so the model is pulled toward class 0 for a run
of steps, then class 1, and forgets the classes before."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2000, 20)
y = x[:, :5].argmax(1)
order = torch.argsort(y, stable=True)
x, y = x[order], y[order]  # as saved, one class after another
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for i in range(0, len(x), 32):  # torch.randperm forgotten
        loss = F.cross_entropy(model(x[i : i + 32]), y[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
