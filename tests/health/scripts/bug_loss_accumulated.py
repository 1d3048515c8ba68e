"""Bug: the epoch's running loss adds up loss tensors, so every step's graph stays alive."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
total_loss = 0
for _step in range(60):
    x = torch.randn(32, 16)
    loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
    total_loss += loss  # bug: should be loss.item()
print("mean loss", float(total_loss) / 60)
