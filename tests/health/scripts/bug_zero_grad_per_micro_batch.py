"""Bug: gradient accumulation over 4 micro-batches with zero_grad inside the micro-batch loop:
each backward starts from cleared gradients, so each step uses the last micro-batch only."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
accumulate = 4
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for i in range(400):  # 100 optimiser steps
    x = torch.randn(16, 20)
    opt.zero_grad()
    (F.cross_entropy(model(x), x[:, :5].argmax(1)) / accumulate).backward()
    if i % accumulate == accumulate - 1:
        opt.step()
print("done")
