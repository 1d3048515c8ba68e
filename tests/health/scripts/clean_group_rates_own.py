"""Clean: parameter groups at rates of their own under schedules written by hand. A backbone at
1e-5 and a head at 1e-3: the backbone frozen at 0 for the first 100 steps while the head warms
up (linear probing, then fine-tuning), then a cosine that scales each group's own rate; and
MAE's layer-wise decay, groups made at one rate with an `lr_scale` each, which the schedule
applies."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2000, 16)
y = (x @ torch.randn(16, 4)).argmax(1)
backbone = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU())
head = nn.Linear(64, 4)
optimizer = torch.optim.AdamW(
    [{"params": backbone.parameters(), "lr": 1e-5}, {"params": head.parameters(), "lr": 1e-3}]
)
base_rates = [group["lr"] for group in optimizer.param_groups]
total = 400
for step in range(total):
    factor = min(1.0, (step + 1) / 40) * 0.5 * (1 + math.cos(math.pi * step / total))
    for group, base in zip(optimizer.param_groups, base_rates, strict=True):
        group["lr"] = base * factor
    if step < 100:
        optimizer.param_groups[0]["lr"] = 0.0  # the backbone frozen while the head learns
    rows = torch.randint(0, 2000, (64,))
    loss = F.cross_entropy(head(backbone(x[rows])), y[rows])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

blocks = [nn.Linear(16, 16) for _ in range(4)]
model = nn.Sequential(
    *[layer for block in blocks for layer in (block, nn.Tanh())], nn.Linear(16, 4)
)
groups = [
    {"params": block.parameters(), "lr_scale": 0.5 ** (len(blocks) - depth)}
    for depth, block in enumerate(blocks)
]
optimizer = torch.optim.AdamW(
    [*groups, {"params": model[-1].parameters(), "lr_scale": 1.0}], lr=1e-3
)
for step in range(300):
    for group in optimizer.param_groups:
        group["lr"] = 1e-3 * min(1.0, (step + 1) / 30) * group["lr_scale"]
    rows = torch.randint(0, 2000, (64,))
    loss = F.cross_entropy(model(x[rows]), y[rows])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
with torch.no_grad():
    print(f"HELDOUT accuracy {(model(x).argmax(1) == y).float().mean():.3f}")
