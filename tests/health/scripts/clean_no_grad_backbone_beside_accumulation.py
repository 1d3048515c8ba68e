"""Clean: a backbone's optimiser, stepped every iteration while the backbone runs under
no_grad (its warm-up phase), beside the head's optimiser, which accumulates gradients over 32
micro-batches and so first steps at the 32nd: the backbone's steps without gradients are no
bug once the head's optimiser steps. A student distilled from a teacher run under no_grad,
through the student's own optimiser, follows."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, 0] > 0).long()
backbone = nn.Linear(16, 32)
head = nn.Sequential(nn.ReLU(), nn.Linear(32, 2))
backbone_opt = torch.optim.SGD(backbone.parameters(), lr=1e-2)
head_opt = torch.optim.SGD(head.parameters(), lr=1e-2)
for step in range(100):
    i = torch.randint(0, 1024, (32,))
    with torch.no_grad():
        features = backbone(x[i])
    loss = F.cross_entropy(head(features), y[i]) / 32
    loss.backward()
    backbone_opt.step()
    backbone_opt.zero_grad()
    if step % 32 == 31:
        head_opt.step()
        head_opt.zero_grad()
print(round(loss.item(), 4))
