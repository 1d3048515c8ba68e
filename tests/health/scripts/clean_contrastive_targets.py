"""Clean: contrastive losses whose targets are right for where their positives sit: in-batch
negatives with torch.arange targets (CLIP's symmetric loss), MoCo-style logits whose column 0
is the positive beside a queue of negatives, each query's own candidates (its item first, as
many as the batch has rows), and a square one of a positive column beside the batch's other
B-1 items, each with targets of all zeros."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
queries, items = torch.randn(2000, 16), torch.randn(2000, 16)
relevant = (queries @ torch.randn(16, 16) + 0.1 * torch.randn(2000, 16)).argmax(1)  # [N]


def tower() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))


def train(how: str) -> None:
    query_tower, item_tower = tower(), tower()
    opt = torch.optim.Adam([*query_tower.parameters(), *item_tower.parameters()], lr=1e-3)
    queue = F.normalize(torch.randn(256, 32), dim=-1)  # [K, 32] negatives
    for _step in range(80):
        batch = torch.randint(0, 2000, (32,))
        q = F.normalize(query_tower(queries[batch]), dim=-1)  # [B, 32]
        k = F.normalize(item_tower(items[relevant[batch]]), dim=-1)  # [B, 32]
        zeros = torch.zeros(len(batch), dtype=torch.long)
        if how == "clip":
            logits = q @ k.T / 0.05  # [B, B]
            labels = torch.arange(len(batch))
            loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
        elif how == "moco":
            positive = (q * k).sum(1, keepdim=True)  # [B, 1]
            logits = torch.cat([positive, q @ queue.T], 1) / 0.05  # [B, 1 + K]
            loss = F.cross_entropy(logits, zeros)
            queue = torch.cat([k.detach(), queue])[:256]
        elif how == "candidates":  # each query's own 32: its item first, 31 random ones
            others = items[torch.randint(0, 2000, (len(batch), 31))]  # [B, 31, 16]
            candidates = torch.cat([items[relevant[batch]][:, None], others], 1)  # [B, 32, 16]
            keys = F.normalize(item_tower(candidates), dim=-1)  # [B, 32, 32]
            logits = (keys @ q.unsqueeze(-1)).squeeze(-1) / 0.05  # [B, 32] with B = 32
            loss = F.cross_entropy(logits, zeros)
        else:  # the positive first, then the batch's other items: [B, B]
            similarity = q @ k.T  # [B, B]
            others = similarity.masked_select(~torch.eye(len(batch), dtype=torch.bool))
            logits = torch.cat([similarity.diagonal()[:, None], others.view(len(batch), -1)], 1)
            loss = F.cross_entropy(logits / 0.05, zeros)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"{how}: loss {loss.item():.3f}")


for how in ("clip", "moco", "candidates", "positive first"):
    train(how)
