"""Clean: the first layer is frozen half-way through (requires_grad_(False), as gradual freezing
in fine-tuning does) while the optimiser keeps it; the optimiser of a second encoder steps on
every 4th step only, accumulating its gradients over 4 steps, zeroed after each of its steps."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))
side = nn.Linear(16, 32)  # a second encoder, added to the first layer's output
opt = torch.optim.SGD(model.parameters(), lr=0.01)
opt_side = torch.optim.SGD(side.parameters(), lr=0.01)
for step in range(200):
    if step == 100:
        for p in model[0].parameters():
            p.requires_grad_(False)
    x = torch.randn(32, 16)
    y = (x[:, 0] > 0).long()
    opt.zero_grad()
    h = F.relu(model[0](x) + side(x))
    loss = F.cross_entropy(model[4](F.relu(model[2](h))), y)
    loss.backward()
    opt.step()
    if step % 4 == 3:
        opt_side.step()
        opt_side.zero_grad()
