"""Bug: a backbone frozen after a warm-up with requires_grad_(False), while the optimiser,
AdamW with weight decay, keeps it and zero_grad(set_to_none=False) zeroes its gradients in
place: an optimiser skips only parameters whose grad is None, so every step still decays the
frozen weights."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(3000, 16)
y = torch.arange(3000) % 3
x[torch.arange(3000), y] += 2.0
backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
model = nn.Sequential(backbone, nn.Linear(32, 3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
for step in range(120):
    if step == 40:  # the backbone is warmed up: train the head alone from here
        backbone.requires_grad_(False)
    i = torch.randint(0, 3000, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad(set_to_none=False)  # bug: the frozen weights keep a (zero) gradient
    loss.backward()
    opt.step()
print(round(backbone[0].weight.norm().item(), 3))
