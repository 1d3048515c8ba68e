"""Clean: pretrain a small CNN on one task, then fine-tune it with a new head on another with
its batch norm frozen (eval mode, affine weights requires_grad=False), as detection code does
for small batches. The frozen weights keep the gradients of the last pretraining step, and the
second optimiser leaves them out on purpose: nothing that trains is missing from it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


def images(n: int, task: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Task A: a horizontal or a vertical bar; task B: a bar in the top or the bottom half."""
    x, y = 0.3 * torch.randn(n, 1, 12, 12), torch.randint(0, 2, (n,))
    for i in range(n):
        r = int(torch.randint(2, 10, ()))
        if task == "B":
            x[i, 0, r // 2 + (6 if y[i] else 0), 2:10] += 1.5
        elif y[i]:
            x[i, 0, r, 2:10] += 1.5
        else:
            x[i, 0, 2:10, r] += 1.5
    return x, y


backbone = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()
)  # [B, 1, 12, 12] -> [B, 8 * 36]
head_a = nn.Linear(8 * 36, 2)
opt = torch.optim.Adam([*backbone.parameters(), *head_a.parameters()], lr=2e-3)
for _step in range(60):
    x, y = images(32, "A")
    loss = F.cross_entropy(head_a(backbone(x)), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"task A loss {loss.item():.3f}")


def freeze_norm(m: nn.Module) -> None:
    if isinstance(m, nn.BatchNorm2d):
        m.eval()
        m.requires_grad_(False)


backbone.apply(freeze_norm)
head_b = nn.Linear(8 * 36, 2)
trained = [p for p in backbone.parameters() if p.requires_grad] + list(head_b.parameters())
opt = torch.optim.SGD(trained, lr=0.01, momentum=0.9)
for _step in range(100):
    x, y = images(8, "B")
    loss = F.cross_entropy(head_b(backbone(x)), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"task B loss {loss.item():.3f}")
