"""Bug: a step decay written by hand to optimizer.lr, an attribute SGD never reads (it reads
each param group's "lr"): the run trains at the first rate throughout, and its noise floor
stays where a decayed rate would have lowered it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
w = torch.randn(20, 1)
x = torch.randn(6000, 20)
y = x @ w + torch.randn(6000, 1)  # noise of variance 1: the best held-out MSE is 1.0
model = nn.Linear(20, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
lr = 0.05
for epoch in range(9):
    if epoch in (3, 6):
        lr *= 0.1
        opt.lr = lr  # bug: for g in opt.param_groups: g["lr"] = lr
    for i in range(0, 5000, 4):
        loss = F.mse_loss(model(x[i : i + 4]), y[i : i + 4])
        opt.zero_grad()
        loss.backward()
        opt.step()
with torch.no_grad():
    mse = F.mse_loss(model(x[5000:]), y[5000:]).item()
print(f"held-out MSE {mse:.3f} (noise floor 1.0), trained at lr {opt.param_groups[0]['lr']:g}")
