"""Bug: gradients clipped between zero_grad() and backward(): the clip sees no gradients, and
every step applies the fresh ones unclipped (a loss that spikes now and then blows up)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for _step in range(120):
    x = torch.randn(32, 20)
    opt.zero_grad()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    loss.backward()
    opt.step()
print("done")
