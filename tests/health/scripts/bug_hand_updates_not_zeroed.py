"""Bug: PyTorch's tutorial loop, weights updated by hand under no_grad, without the
``p.grad.zero_()`` after the update: each step adds its gradient to all earlier ones."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, :3].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
for _ in range(120):
    i = torch.randint(0, 1024, (32,))
    loss = F.cross_entropy(model(x[i]), y[i])
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad  # bug: p.grad.zero_() forgotten
print(round(loss.item(), 3))
