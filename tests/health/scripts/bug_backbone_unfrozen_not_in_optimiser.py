"""Bug: fine-tuning with a frozen backbone beside the head, the optimiser built over the head
alone; at step 40 the backbone is unfrozen for the second phase and add_param_group is
forgotten: from then on it gets gradients (never cleared: zero_grad does not reach it) and
never changes."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 12)
y = (torch.tanh(x @ torch.randn(12, 8)) @ torch.randn(8, 4)).argmax(1)
backbone = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
head = nn.Linear(64, 4)
backbone.requires_grad_(False)
opt = torch.optim.Adam(head.parameters(), lr=3e-3)
for step in range(150):
    if step == 40:
        backbone.requires_grad_(True)  # bug: opt.add_param_group({"params": ...}) left out
    i = torch.randint(0, 1024, (64,))
    loss = F.cross_entropy(head(backbone(x[i])), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.3f}")
