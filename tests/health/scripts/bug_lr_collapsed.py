"""Bug: a scheduler meant per epoch (StepLR, step_size=10 epochs) stepped after every batch:
the learning rate is 1e-5 of its start by step 50 and trains with almost none after that."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.1)
for _epoch in range(2):
    for _step in range(100):
        x = torch.randn(32, 20)
        loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        scheduler.step()
print("done")
