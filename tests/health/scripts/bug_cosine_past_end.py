"""Bug: CosineAnnealingLR(T_max=epochs), meant once an epoch, stepped after every batch: after
10 batches the learning rate climbs back to its peak, and it cycles every 20 batches."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
epochs = 10
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
for _epoch in range(epochs):
    for _step in range(30):
        x = torch.randn(32, 20)
        loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        scheduler.step()
print("done")
