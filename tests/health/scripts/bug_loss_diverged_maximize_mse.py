"""Bug: Adam given maximize=True on a regression loss to minimise: every step climbs the mean
squared error, which rises far above where it started, finite, at a learning rate Adam trains
this model with."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2, maximize=True)  # bug: a loss to minimise
x = torch.randn(2048, 20)
y = x[:, :5].sum(1, keepdim=True)
for _step in range(200):
    i = torch.randint(0, 2048, (32,))
    loss = F.mse_loss(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
