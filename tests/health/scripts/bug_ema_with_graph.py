"""Bug: weight averages kept by hand in a dict, updated without torch.no_grad(): each average
holds the graph of every update before it, so memory and the backward's bookkeeping grow."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ema = {name: p.detach().clone() for name, p in model.named_parameters()}
for _step in range(120):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :4].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    for name, p in model.named_parameters():
        ema[name] = 0.99 * ema[name] + 0.01 * p  # bug: under torch.no_grad(), or p.detach()
print("done")
