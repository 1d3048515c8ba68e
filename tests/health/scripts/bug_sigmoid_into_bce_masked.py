"""Bug: a one-stage detector's classification head ends in a sigmoid, and its scores go into a
focal loss built on ``binary_cross_entropy_with_logits``, which applies the sigmoid again. The
ignored anchors are left out with a mask (``scores[valid]``), as torchvision's RetinaNet does:
the probabilities are found behind that selection."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
B, A = 16, 2  # images a batch, anchors a cell of the 8 x 8 map


def focal_loss(logits, targets, alpha=0.25, gamma=2.0):
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * ce * (1 - p_t) ** gamma).sum()


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.cls_head = nn.Conv2d(32, A, 3, padding=1)

    def forward(self, x):
        scores = torch.sigmoid(self.cls_head(self.backbone(x)))  # bug: the loss takes logits
        return scores.permute(0, 2, 3, 1).reshape(x.shape[0], -1)  # [B, 8 * 8 * A]


model = Detector()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for _step in range(60):
    images = torch.randn(B, 3, 32, 32)
    labels = torch.zeros(B, 8 * 8 * A)
    labels[torch.rand(B, 8 * 8 * A) < 0.05] = 1.0
    labels[torch.rand(B, 8 * 8 * A) < 0.05] = -1.0  # ignored: between the IoU thresholds
    scores = model(images)
    valid = labels >= 0
    loss = focal_loss(scores[valid], labels[valid]) / (labels == 1).sum().clamp(min=1)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
