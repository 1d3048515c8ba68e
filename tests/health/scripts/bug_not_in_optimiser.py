"""Bug: a classifier head added to the model after the optimiser was built: it gets gradients
at every step, but no optimiser holds it, so it stays at its random initialisation."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model.append(nn.Linear(64, 5))  # bug: added after the optimiser was built
for _step in range(60):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
