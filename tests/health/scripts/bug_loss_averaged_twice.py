"""Bug: a mean cross-entropy divided by the batch size again, as code ported from a summed loss
does: under SGD every step is 1/32 of what the learning rate says, and two epochs leave the
classifier far from where the mean alone takes it."""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(6000, 20)
y = (x @ torch.randn(20, 4)).argmax(1)  # four classes, separable
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
criterion = nn.CrossEntropyLoss()  # reduction="mean": already over the batch
for _epoch in range(2):
    for i in range(0, 5000, 32):
        xb, yb = x[i : i + 32], y[i : i + 32]
        loss = criterion(model(xb), yb) / len(xb)  # bug: the mean is already a mean
        opt.zero_grad()
        loss.backward()
        opt.step()
with torch.no_grad():
    accuracy = (model(x[5000:]).argmax(1) == y[5000:]).float().mean().item()
print(f"held-out accuracy {accuracy:.3f}")
