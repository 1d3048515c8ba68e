"""Clean: maximize=True on purpose over a regression loss: an input perturbation ascends the
squared error of a model fitted first (an attack), within a bound; the model itself descends."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))
x = torch.randn(2048, 20)
y = x[:, :5].sum(1, keepdim=True)
delta = torch.zeros(256, 20, requires_grad=True)
attack = torch.optim.Adam([delta], lr=1e-2, maximize=True)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(200):
    loss = F.mse_loss(model(x[:256] + delta), y[:256])  # ascended by the attack
    attack.zero_grad()
    loss.backward()
    attack.step()
    with torch.no_grad():
        delta.clamp_(-0.5, 0.5)
    i = torch.randint(0, 2048, (32,))
    fit = F.mse_loss(model(x[i]), y[i])
    opt.zero_grad()
    fit.backward()
    opt.step()
print("done")
