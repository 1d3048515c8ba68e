"""Bug: the validation loop runs after model.eval() but outside torch.no_grad(): autograd
records every evaluation forward and keeps its activations alive with the outputs, which
costs time and memory for gradients nobody takes."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x_val = torch.randn(320, 20)
for epoch in range(3):
    model.train()
    for _step in range(40):
        x = torch.randn(32, 20)
        loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()  # torch.no_grad() forgotten
    outputs = [model(x_val[i : i + 32]) for i in range(0, len(x_val), 32)]
    accuracy = (torch.cat(outputs).argmax(1) == x_val[:, :5].argmax(1)).float().mean()
    print(epoch, round(accuracy.item(), 3))
