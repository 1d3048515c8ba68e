"""Bug: weights updated by hand with the gradient added, not subtracted
(``p.data.add_(p.grad, alpha=lr)``, the minus of word_language_model's ``alpha=-lr`` lost):
every update climbs the loss."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, :3].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 2))
lr = 0.05
for _ in range(60):
    i = torch.randint(0, 1024, (32,))
    model.zero_grad()
    loss = F.cross_entropy(model(x[i]), y[i])
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=lr)  # bug: alpha=-lr
print(round(loss.item(), 3))
