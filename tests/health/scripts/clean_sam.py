"""Clean: sharpness-aware minimisation (SAM). Each step has two backwards from cleared
gradients: the first one's gradient moves the weights uphill, in place, and the second one's,
taken there, is what the optimiser steps on after the weights are put back."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
rho = 0.05
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
params = list(model.parameters())
for _step in range(150):
    x = torch.randn(32, 20)
    y = x[:, :5].argmax(1)
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
        ascent = [rho * p.grad / (norm + 1e-12) for p in params]
        for p, e in zip(params, ascent, strict=True):
            p.add_(e)
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        for p, e in zip(params, ascent, strict=True):
            p.sub_(e)
    opt.step()
print("done")
