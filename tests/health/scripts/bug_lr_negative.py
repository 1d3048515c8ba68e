"""Bug: a linear decay to zero over 10 epochs, LambdaLR(lambda e: 1 - e / 10), stepped after
every batch: from step 11 the learning rate is negative and the optimiser climbs the loss."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1 - epoch / 10)
for _step in range(40):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    scheduler.step()
print("done")
