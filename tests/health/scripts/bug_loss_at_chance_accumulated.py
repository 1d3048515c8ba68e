"""Bug: inputs and labels drawn with two separate permutations, as in bug_loss_at_chance.py,
with gradients accumulated over 4 micro-batches, each loss divided by 4 before its backward (as
the transformers ``Trainer`` and accelerate do with ``gradient_accumulation_steps=4``): the
cross-entropy stays at log(3), the value backward is given at a quarter of it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(3000, 16)
y = torch.arange(3000) % 3  # three balanced classes, learnable from x below
x[torch.arange(3000), y] += 2.0
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
accumulation_steps = 4
for _ in range(250):
    opt.zero_grad()
    for _micro_batch in range(accumulation_steps):
        xb = x[torch.randperm(3000)[:64]]
        yb = y[torch.randperm(3000)[:64]]  # bug: the same permutation must pick both
        loss = F.cross_entropy(model(xb), yb)
        (loss / accumulation_steps).backward()
    opt.step()
print(round(loss.item(), 3))
