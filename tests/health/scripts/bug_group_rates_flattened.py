"""Bug: a backbone pretrained on a large related task is fine-tuned at 1e-5 beside a new head at
1e-3, two parameter groups of one Adam, but the warm-up and cosine schedule written by hand puts
one rate into every group: the backbone trains at the head's rate from the first step, and on
100 noisy examples it learns them by heart (all of them right) and loses what it was pretrained
for. Held-out accuracy 0.665; with each group's own rate scaled (`g["base_lr"] * factor`), 0.821."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
mixing = torch.randn(32, 64) / 32**0.5, torch.randn(64, 8) / 6


def concepts(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(2 * torch.relu(x @ mixing[0]) @ mixing[1])


generator = torch.Generator().manual_seed(1)
readouts = torch.randn(8, 24, generator=generator)  # the large task: 24 readings of the concepts
x_large = torch.randn(16384, 32, generator=generator)
y_large = concepts(x_large) @ readouts
classes = torch.randn(8, 4, generator=generator)  # the small one: 4 classes, 30% labels flipped


def make(n: int, noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 32, generator=generator)
    y = (concepts(x) @ classes).argmax(1)
    flipped = torch.rand(n, generator=generator) < noise
    return x, torch.where(flipped, torch.randint(0, 4, (n,), generator=generator), y)


x, y = make(100, 0.3)
x_test, y_test = make(4000, 0.0)

backbone = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU())
pretraining_head = nn.Linear(64, 24)
optimizer = torch.optim.Adam([*backbone.parameters(), *pretraining_head.parameters()], lr=1e-3)
for _step in range(800):
    rows = torch.randint(0, len(x_large), (512,))
    loss = F.mse_loss(pretraining_head(backbone(x_large[rows])), y_large[rows])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

torch.manual_seed(2)
head = nn.Linear(64, 4)
base_lr = 1e-3
optimizer = torch.optim.Adam(
    [{"params": backbone.parameters(), "lr": 1e-5}, {"params": head.parameters(), "lr": base_lr}]
)
warmup, total = 40, 400
for step in range(total):
    if step < warmup:
        factor = (step + 1) / warmup
    else:
        factor = 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
    for group in optimizer.param_groups:
        group["lr"] = base_lr * factor  # bug: group["base_lr"] * factor, each its own
    rows = torch.randint(0, len(x), (32,))
    loss = F.cross_entropy(head(backbone(x[rows])), y[rows])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    accuracy = (head(backbone(x_test)).argmax(1) == y_test).float().mean().item()
    learnt = (head(backbone(x)).argmax(1) == y).float().mean().item()
print(f"HELDOUT accuracy {accuracy:.3f} (training examples {learnt:.3f})")
