"""Clean: batch norms as PyTorch reads their momentum: the default 0.1; 0.01 (Keras's 0.99);
None (a cumulative average); a layer that keeps no running statistics, whose momentum is
never used; and a frozen backbone's layers, held in eval mode, whose momentum of 0.99 never
moves their statistics."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(20, 32), nn.BatchNorm1d(32, momentum=0.99), nn.ReLU())
for p in backbone.parameters():
    p.requires_grad_(False)
head = nn.Sequential(
    nn.Linear(32, 32),
    nn.BatchNorm1d(32),
    nn.ReLU(),
    nn.Linear(32, 32),
    nn.BatchNorm1d(32, momentum=0.01),
    nn.ReLU(),
    nn.Linear(32, 32),
    nn.BatchNorm1d(32, momentum=None),
    nn.ReLU(),
    nn.Linear(32, 32),
    nn.BatchNorm1d(32, momentum=0.9, track_running_stats=False),
    nn.ReLU(),
    nn.Linear(32, 4),
)
opt = torch.optim.Adam(head.parameters(), lr=1e-3)
w = torch.randn(20, 4)
for _step in range(100):
    x = torch.randn(64, 20)
    y = (x @ w).argmax(1)
    backbone.eval()  # frozen: its statistics stay as loaded
    loss = F.cross_entropy(head(backbone(x)), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"last loss {loss.item():.3f}")
