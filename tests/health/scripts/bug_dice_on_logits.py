"""Bug: a segmentation loss of binary cross-entropy plus a soft Dice written by hand, the Dice
given the network's logits where sigmoid probabilities belong: 1 - dice is minimised by logits
run off below 0, and the masks it predicts are wrong (IoU near 0)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
S = 16
rows, cols = torch.meshgrid(torch.arange(S).float(), torch.arange(S).float(), indexing="ij")


def batch(n):
    cx, cy = torch.rand(2, n, 1, 1) * 8 + 4
    radius = torch.rand(n, 1, 1) * 2 + 2
    mask = (((cols - cx) ** 2 + (rows - cy) ** 2) < radius**2).float()  # [n, S, S]
    image = mask * (0.5 + 0.5 * torch.rand(n, 1, 1)) + 0.3 * torch.randn(n, S, S)
    return image[:, None], mask[:, None]  # [n, 1, S, S] each


def dice_loss(logits, target, smooth=1.0):
    p = logits  # bug: torch.sigmoid(logits)
    inter = (p * target).sum((1, 2, 3))
    total = p.sum((1, 2, 3)) + target.sum((1, 2, 3))
    return (1 - (2 * inter + smooth) / (total + smooth)).mean()


model = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
    nn.Conv2d(16, 1, 1),
)  # fmt: skip
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _step in range(80):
    images, masks = batch(16)
    logits = model(images)
    loss = F.binary_cross_entropy_with_logits(logits, masks) + dice_loss(logits, masks)
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    images, masks = batch(64)
    predicted = (model(images) > 0).float()
    iou = (predicted * masks).sum() / ((predicted + masks) > 0).float().sum()
print(f"last loss {loss.item():.3f}, IoU {iou.item():.3f}")
