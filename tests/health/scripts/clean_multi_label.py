"""Clean: multi-hot targets the ways that are meant: nn.BCEWithLogitsLoss, one probability a
label; a softmax cross-entropy against each row divided by its sum (a distribution over the
row's labels, ranked: Mahajan et al. 2018's hashtags), rows without labels left all zero; and
a cross-entropy against a one-hot times its class's weight (one label a row, weighted by
hand)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
CLASSES, FEATURES = 12, 24
prototypes = torch.randn(CLASSES, FEATURES)
class_weight = torch.rand(CLASSES) * 3 + 0.5


def data(n):
    y = (torch.rand(n, CLASSES) < 0.15).float()  # 0 to several labels a row
    return y @ prototypes + torch.randn(n, FEATURES), y


model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 2 * CLASSES))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _step in range(120):
    x, y = data(64)
    tags, ranks = model(x).split(CLASSES, dim=1)
    shares = y / y.sum(1, keepdim=True).clamp(min=1)
    first = F.one_hot(y.argmax(1), CLASSES).float() * class_weight[y.argmax(1)][:, None]
    loss = (
        nn.BCEWithLogitsLoss()(tags, y)
        + F.cross_entropy(ranks, shares)
        + 0.1 * F.cross_entropy(ranks, first)
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    x, y = data(1000)
    predicted = (torch.sigmoid(model(x)[:, :CLASSES]) > 0.5).float()
f1 = 2 * (predicted * y).sum() / (predicted.sum() + y.sum())
print(f"held-out micro-F1 {f1.item():.2f}")
