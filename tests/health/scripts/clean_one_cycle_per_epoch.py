"""Clean: OneCycleLR sized in epochs (total_steps=epochs) and stepped once per epoch; a second
run sized in optimiser steps and stepped after each, stopped early (at a third of its steps)."""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(1280, 16)
y = (x[:, 0] > 0).long()
for sized_in_steps in (False, True):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    epochs, batches = 10, 40
    total = epochs * batches if sized_in_steps else epochs
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=total)
    for _epoch in range(epochs if not sized_in_steps else 3):
        for xb, yb in zip(x.split(32), y.split(32), strict=True):
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sized_in_steps:
                sched.step()
        if not sized_in_steps:
            sched.step()
    print(round(loss.item(), 3))
