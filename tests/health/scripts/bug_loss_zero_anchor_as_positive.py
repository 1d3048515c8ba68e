"""Bug: the triplet sampler returns each anchor as its own positive, so d(anchor, positive) is
0 and with normalised embeddings every negative is already beyond the margin: the loss is
exactly 0 from the first step, every gradient is zero, and the embedding never trains."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
CLASSES, DIM = 20, 16
centres = torch.randn(CLASSES, DIM)


def triplets(n: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    anchor_y = torch.randint(0, CLASSES, (n,))
    negative_y = (anchor_y + torch.randint(1, CLASSES, (n,))) % CLASSES
    anchor = centres[anchor_y] + 0.9 * torch.randn(n, DIM)
    positive = anchor  # bug: a fresh draw of the anchor's class
    negative = centres[negative_y] + 0.9 * torch.randn(n, DIM)
    return anchor, positive, negative


net = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 16))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
criterion = nn.TripletMarginLoss(margin=0.3)
for _step in range(100):
    a, p, n = (F.normalize(net(x), dim=1) for x in triplets())  # [B, 16] each
    loss = criterion(a, p, n)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")
