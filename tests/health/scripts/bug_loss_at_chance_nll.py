"""Bug: as bug_loss_at_chance.py, labels drawn with a second permutation, with the model ending
in LogSoftmax and trained with nll_loss (a cross-entropy too): the loss stays at log(3)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(3000, 16)
y = torch.arange(3000) % 3
x[torch.arange(3000), y] += 2.0
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3), nn.LogSoftmax(dim=1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(250):
    xb = x[torch.randperm(3000)[:64]]
    yb = y[torch.randperm(3000)[:64]]  # bug: the same permutation must pick both
    loss = F.nll_loss(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
