"""Clean: models run without gradients in train mode that are no frozen teacher. A momentum
teacher (BYOL, DINO), an average of the student updated in place after each step, in train mode
with its batch norm on purpose; and a frozen teacher put in eval mode, distilled from."""

import copy

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
student = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 16))
momentum = copy.deepcopy(student).requires_grad_(False)  # stays in train mode, as BYOL's does
frozen = nn.Sequential(nn.Linear(20, 64), nn.Dropout(0.3), nn.ReLU(), nn.Linear(64, 16))
frozen.requires_grad_(False).eval()
opt = torch.optim.Adam(student.parameters(), lr=1e-3)
for _ in range(100):
    x = torch.randn(64, 20)
    view1, view2 = x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)
    with torch.no_grad():
        target = F.normalize(momentum(view2), dim=-1)
        hint = F.normalize(frozen(x), dim=-1)
    online = F.normalize(student(view1), dim=-1)
    loss = (2 - 2 * (online * target).sum(-1)).mean() + F.mse_loss(online, hint)
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        for t, s in zip(momentum.parameters(), student.parameters(), strict=True):
            t.lerp_(s, 0.01)
print(round(loss.item(), 4))
