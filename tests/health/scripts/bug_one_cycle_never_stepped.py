"""Bug: a OneCycleLR built over the optimiser and never stepped (``scheduler.step()`` left out
of the loop): the run trains at its starting rate, max_lr / 25, all along."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100)
x = torch.randn(2048, 16)
y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
for _ in range(100):
    i = torch.randint(0, 2048, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()  # bug: schedule.step() after it
print(round(loss.item(), 3), opt.param_groups[0]["lr"])
