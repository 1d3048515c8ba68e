"""Clean: a backbone and a head with optimisers of their own; the backbone runs under no_grad
for the second half (the head alone is tuned), while its optimiser, the first to step, goes on
stepping with no gradients. (Frozen in the second half rather than the first: steps that get
heavier half-way would read as a step-time regression.)"""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
head = nn.Linear(64, 4)
opt_backbone = torch.optim.AdamW(backbone.parameters(), lr=1e-4)
opt_head = torch.optim.AdamW(head.parameters(), lr=1e-3)
for step in range(120):
    x = torch.randn(32, 20)
    with torch.set_grad_enabled(step < 60):
        features = backbone(x)
    loss = F.cross_entropy(head(features), x[:, :4].argmax(1))
    opt_backbone.zero_grad()
    opt_head.zero_grad()
    loss.backward()
    opt_backbone.step()
    opt_head.step()
print("done")
