"""Bug: ExponentialLR(gamma=0.99), meant once an epoch, stepped after every batch: the learning
rate is below 1e-4 of its start from step 917 on, the last quarter of the run."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.99)
for _epoch in range(12):
    for _step in range(100):
        x = torch.randn(32, 20)
        loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        scheduler.step()
print("done")
