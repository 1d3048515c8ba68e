"""Bug: gradients taken with torch.autograd.grad and added into .grad by hand, and never
cleared: every step adds its gradient to all earlier ones (no backward ever runs)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.01)
for _step in range(100):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    grads = torch.autograd.grad(loss, params)
    for p, g in zip(params, grads, strict=True):
        p.grad = g if p.grad is None else p.grad + g  # opt.zero_grad() forgotten
    opt.step()
print("done")
