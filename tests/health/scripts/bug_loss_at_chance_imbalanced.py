"""Bug: as ``bug_loss_at_chance.py`` (inputs and labels drawn with two separate permutations),
on imbalanced classes (80% / 15% / 5%): the model learns how often each class comes and its
loss settles at the entropy of those frequencies, 0.61, not at log(3) = 1.10; it still learns
nothing from its inputs."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(4000, 16)
y = torch.zeros(4000, dtype=torch.long)
y[3200:3800], y[3800:] = 1, 2  # imbalanced classes, learnable from x below
x[torch.arange(4000), y] += 2.0
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(400):
    xb = x[torch.randperm(4000)[:64]]
    yb = y[torch.randperm(4000)[:64]]  # bug: the same permutation must pick both
    loss = F.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
