"""Clean, near the loss checks: a segmentation mask of 0/1 with void pixels (255) given weight 0
in BCEWithLogitsLoss; multi-label targets with -1 for unknown, masked out of a reduction="none"
loss; soft targets reduced over the batch first ((-q * logp).mean(0).sum(), and class-weighted);
a density fitted on a grid by kl_div, whose log-densities go above 0 (the target a density,
not a distribution over classes)."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
seg = nn.Conv2d(3, 1, 3, padding=1)
tagger = nn.Linear(16, 5)
classifier = nn.Linear(16, 10)
log_scale, shift = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
params = [*seg.parameters(), *tagger.parameters(), *classifier.parameters(), log_scale, shift]
opt = torch.optim.Adam(params, lr=1e-2)
grid = torch.linspace(-3, 3, 601)
dx = float(grid[1] - grid[0])
density = torch.exp(-0.5 * ((grid - 1) / 0.2) ** 2) / (0.2 * math.sqrt(2 * math.pi))
class_weights = torch.linspace(0.5, 1.5, 10)
for _step in range(80):
    images = torch.rand(4, 3, 16, 16)
    mask = (images[:, :1] > 0.5).float()
    mask[:, :, :2] = 255.0  # void: not scored
    void = (mask != 255).float()
    bce = F.binary_cross_entropy_with_logits(seg(images), mask, weight=void)
    x = torch.randn(32, 16)
    labels = torch.randint(-1, 2, (32, 5)).float()  # 1, 0, or -1: unknown
    per_label = F.binary_cross_entropy_with_logits(tagger(x), labels.clamp(min=0), reduction="none")
    known = (labels >= 0).float()
    unknown_masked = (per_label * known).sum() / known.sum()
    per_label_raw = F.binary_cross_entropy_with_logits(tagger(x), labels, reduction="none")
    raw_masked = (per_label_raw * known).sum() / known.sum()
    q = F.softmax(torch.randn(32, 10), dim=1)
    logp = F.log_softmax(classifier(x), dim=1)
    soft = (-q * logp).mean(0).sum() + ((-(q * logp)).mean(0) * class_weights).sum()
    sd = log_scale.exp()
    log_q = -0.5 * ((grid - shift) / sd) ** 2 - torch.log(sd * math.sqrt(2 * math.pi))
    fit = F.kl_div(log_q, density, reduction="sum") * dx
    loss = bce + unknown_masked + raw_masked + soft + fit
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
