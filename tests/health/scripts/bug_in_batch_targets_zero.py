"""Bug: a two-tower retrieval model trained with in-batch negatives, its cross-entropy given
targets of all zeros: the logits are the batch's query-item similarities, each query's own item
on the diagonal, so every row is told that its positive is the batch's first item (the targets
are torch.arange(B))."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
queries, items = torch.randn(2000, 16), torch.randn(2000, 16)
relevant = (queries @ torch.randn(16, 16) + 0.1 * torch.randn(2000, 16)).argmax(1)  # [N]


def tower() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))


query_tower, item_tower = tower(), tower()
opt = torch.optim.Adam([*query_tower.parameters(), *item_tower.parameters()], lr=1e-3)
for step in range(150):
    batch = torch.randint(0, 2000, (64,))
    q = F.normalize(query_tower(queries[batch]), dim=-1)  # [B, 32]
    k = F.normalize(item_tower(items[relevant[batch]]), dim=-1)  # [B, 32]: each query's item
    logits = q @ k.T / 0.05  # [B, B]: row i's positive in column i
    loss = F.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long))  # bug: arange
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f}")
