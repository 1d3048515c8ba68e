"""Bug: a linear warm-up from 0 whose scheduler is never stepped: the learning rate stays at
its first value, 0, and the optimiser changes nothing."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
warmup = 100
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / warmup))
for _step in range(120):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()  # scheduler.step() forgotten
print("done")
