"""Bug: the optimiser is built over a model that is then re-created, so the model that trains
gets gradients and the optimiser steps parameters that never have one."""

import torch
from torch import nn
from torch.nn import functional as F


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))


torch.manual_seed(0)
model = build()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model = build()  # re-built (say, after reading a config): opt still holds the first one
for _step in range(100):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
