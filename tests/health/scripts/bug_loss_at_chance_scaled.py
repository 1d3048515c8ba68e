"""Bug: inputs and labels drawn with two separate permutations, as in bug_loss_at_chance.py,
with the loss multiplied by a loss weight of 1 and divided by the accumulation steps, 1, before
its backward (as the transformers ``Trainer`` and accelerate do): the loss stays at log(3)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(3000, 16)
y = torch.arange(3000) % 3  # three balanced classes, learnable from x below
x[torch.arange(3000), y] += 2.0
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_weight, accumulation_steps = 1.0, 1
for _ in range(250):
    xb = x[torch.randperm(3000)[:64]]
    yb = y[torch.randperm(3000)[:64]]  # bug: the same permutation must pick both
    loss = loss_weight * F.cross_entropy(model(xb), yb)
    opt.zero_grad()
    (loss / accumulation_steps).backward()
    opt.step()
print(round(loss.item(), 3))
