"""Clean: gradient accumulation over 4 micro-batches, each loss divided by 4 before its
backward, zeroed once per optimiser step (with zero_grad(set_to_none=False): zero tensors, not
None). The step's loss is the sum of what the backwards were given, the mean of the
micro-batches' losses, which it prints: not the last one's quarter."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
opt.zero_grad(set_to_none=False)
losses, step_loss = [], 0.0
for i in range(400):  # 100 optimiser steps
    x = torch.randn(16, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1)) / 4
    loss.backward()
    step_loss += loss.item()
    if i % 4 == 3:
        opt.step()
        opt.zero_grad(set_to_none=False)
        losses.append(step_loss)
        step_loss = 0.0
print("losses", " ".join(f"{v:.6f}" for v in losses))
