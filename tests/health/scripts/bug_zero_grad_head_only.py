"""Bug: only the head's gradients are zeroed (``head.zero_grad()`` where the optimiser holds the
encoder too): the encoder's gradients add up over every step, while the head's, the last
parameters, are cleared as they should be."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
x = torch.randn(2048, 16)
y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
encoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
head = nn.Linear(64, 3)
opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.01)
for _step in range(200):
    i = torch.randint(0, 2048, (32,))
    loss = F.cross_entropy(head(encoder(x[i])), y[i])
    head.zero_grad()  # the bug: opt.zero_grad()
    loss.backward()
    opt.step()
