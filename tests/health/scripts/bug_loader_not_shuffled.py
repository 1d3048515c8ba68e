"""Bug: a training DataLoader without shuffle=True over data stored class by class (as an
ImageFolder lists its files, or a CSV written one label at a time): every batch holds one
class, so the model is pulled toward class 0 for a run of steps, then class 1, and forgets the
classes before."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(2000, 20)
y = x[:, :5].argmax(1)
order = torch.argsort(y, stable=True)  # sorted by label, as read from disk
train = DataLoader(TensorDataset(x[order], y[order]), batch_size=32)  # shuffle=True forgotten
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for inputs, labels in train:
        loss = F.cross_entropy(model(inputs), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
