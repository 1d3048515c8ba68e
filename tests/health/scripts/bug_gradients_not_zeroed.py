"""Bug: optimizer.zero_grad() is never called, so every step adds its gradient to all earlier
ones (the step uses the sum of the run's gradients)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _step in range(100):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    loss.backward()
    opt.step()
print("done")
