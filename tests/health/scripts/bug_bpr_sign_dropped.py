"""Bug: a BPR recommender whose loss lost its minus, F.logsigmoid(pos - neg).mean(): it is
minimised, so the model learns to score the items each user skipped above the ones they
chose, and the loss falls without bound (-0.7, -10, -140, ...)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
USERS, ITEMS, D = 100, 80, 16
chosen = torch.randint(0, ITEMS, (USERS, 8))  # the items each user chose
users, items = nn.Embedding(USERS, D), nn.Embedding(ITEMS, D)
opt = torch.optim.Adam([*users.parameters(), *items.parameters()], lr=1e-2)
for _step in range(150):
    u = torch.randint(0, USERS, (256,))
    pos = chosen[u, torch.randint(0, 8, (256,))]
    neg = torch.randint(0, ITEMS, (256,))
    loss = F.logsigmoid(
        (users(u) * (items(pos) - items(neg))).sum(1)
    ).mean()  # bug: -F.logsigmoid(...)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.1f}")
