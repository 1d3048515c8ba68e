"""Bug: OneCycleLR sized in optimiser steps (epochs x batches) but stepped once per epoch, at
the end of the epoch loop: its warm-up never ends, so the whole run trains at max_lr / 25."""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(1280, 16)
y = (x[:, 0] > 0).long()
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
epochs, batches = 10, 40
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=epochs * batches)
for _epoch in range(epochs):
    for xb, yb in zip(x.split(32), y.split(32), strict=True):
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    sched.step()  # bug: meant after every opt.step()
print(round(loss.item(), 3))
