"""Bug: ``optimizer.zero_grad(set_to_none=False)`` between ``loss.backward()`` and
``optimizer.step()``: the gradients are there, every one zero, so each step applies only the
weight decay and momentum (none here): the model never learns. With ``set_to_none=True`` the
gradients are gone instead (``step-without-gradients`` after 20 steps); zeros are read on the
sampled steps, the first and last parameters' gradients all zero on 3 in a row."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for step in range(100):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    loss.backward()
    optimizer.zero_grad(set_to_none=False)  # bug: before backward(), not after it
    optimizer.step()
    if step % 25 == 0:
        print(f"step {step} loss {loss.item():.4f}")
