"""Clean: an optimiser over a frozen layer, stepped every iteration, beside the head's
optimiser, which accumulates gradients over 32 micro-batches and so first steps at the 32nd:
the frozen optimiser's steps without gradients are no bug once the head's optimiser steps."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, 0] > 0).long()
frozen = nn.Linear(16, 32).requires_grad_(False)
head = nn.Sequential(nn.ReLU(), nn.Linear(32, 2))
frozen_opt = torch.optim.SGD(frozen.parameters(), lr=1e-2)
head_opt = torch.optim.SGD(head.parameters(), lr=1e-2)
for step in range(100):
    i = torch.randint(0, 1024, (32,))
    loss = F.cross_entropy(head(frozen(x[i])), y[i]) / 32
    loss.backward()
    frozen_opt.step()
    frozen_opt.zero_grad()
    if step % 32 == 31:
        head_opt.step()
        head_opt.zero_grad()
print(round(loss.item(), 4))
