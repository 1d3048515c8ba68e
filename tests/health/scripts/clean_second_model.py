"""Clean: two models, each with its own optimiser, the second first run after the first one's
first step (a classifier, then a regressor on the same batch): the regressor's work is
compute, not a wait for data, although no model of the clock's runs it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
clf = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
reg = nn.Sequential(
    nn.Linear(10, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)
)
opt_c = torch.optim.Adam(clf.parameters(), lr=1e-3)
opt_r = torch.optim.Adam(reg.parameters(), lr=1e-3)
x = torch.randn(4096, 10)
y, z = (x[:, 0] > 0).long(), x[:, :1] * 2
for _ in range(300):
    i = torch.randint(0, 4096, (128,))
    loss = F.cross_entropy(clf(x[i]), y[i])
    opt_c.zero_grad()
    loss.backward()
    opt_c.step()
    loss_r = F.mse_loss(reg(x[i]), z[i])
    opt_r.zero_grad()
    loss_r.backward()
    opt_r.step()
print(round(loss.item(), 3), round(loss_r.item(), 3))
