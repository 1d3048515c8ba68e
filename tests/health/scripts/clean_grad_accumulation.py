"""Clean: gradient accumulation over 4 micro-batches, zeroed once per optimiser step (with
zero_grad(set_to_none=False): zero tensors, not None), and gradients computed with
torch.autograd.grad and set on .grad by hand for a second model."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
opt.zero_grad(set_to_none=False)
for i in range(400):  # 100 optimiser steps
    x = torch.randn(16, 20)
    (F.cross_entropy(model(x), x[:, :5].argmax(1)) / 4).backward()
    if i % 4 == 3:
        opt.step()
        opt.zero_grad(set_to_none=False)
print("done")
