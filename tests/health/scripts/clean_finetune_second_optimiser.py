"""Clean: pre-train a backbone with a head on task A, then freeze the backbone and train a new
head for task B with its own optimiser while the first one is still alive (``opt`` stays in
scope). The second optimiser takes over as the clock after a few steps; those steps count:
the series holds all 200 steps' losses, as the script prints them (the first 9 of the second
phase were missing, and every later step read 9 behind)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(6400, 24)
y_a = (x[:, :6].sum(1) > 0).long() + (x[:, 6:12].sum(1) > 0).long() * 2
y_b = (x[:, :12].sum(1) > 1).long()
backbone = nn.Sequential(nn.Linear(24, 64), nn.ReLU())
model = nn.Sequential(backbone, nn.Linear(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
losses = []
for i in range(100):
    idx = torch.arange(i * 64, (i + 1) * 64) % 6400
    loss = F.cross_entropy(model(x[idx]), y_a[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
backbone.requires_grad_(False)
head = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2))
opt_b = torch.optim.SGD(head.parameters(), lr=0.05, momentum=0.9)
for i in range(100):
    idx = torch.arange(i * 64, (i + 1) * 64) % 6400
    with torch.no_grad():
        features = backbone(x[idx])
    loss = F.cross_entropy(head(features), y_b[idx])
    opt_b.zero_grad()
    loss.backward()
    opt_b.step()
    losses.append(loss.item())
print("losses", " ".join(f"{v:.6f}" for v in losses))
