"""Bug: sparse embeddings and the dense layers get an optimiser each (SparseAdam cannot take
dense gradients), and the loop steps the sparse one only: the dense layers get gradients on
every step and never change. Their optimiser exists, so the finding names it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
USERS, ITEMS = 200, 100


class Recommender(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.users = nn.Embedding(USERS, 16, sparse=True)
        self.items = nn.Embedding(ITEMS, 16, sparse=True)
        self.mlp = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        pair = torch.cat([self.users(user), self.items(item)], 1)  # [B, 32]
        return self.mlp(pair).squeeze(1)  # [B]


model = Recommender()
sparse_opt = torch.optim.SparseAdam([*model.users.parameters(), *model.items.parameters()], 1e-2)
dense_opt = torch.optim.Adam(model.mlp.parameters(), lr=1e-2)
taste = torch.randn(USERS, 4) @ torch.randn(4, ITEMS)  # who likes what
for _step in range(100):
    user, item = torch.randint(0, USERS, (128,)), torch.randint(0, ITEMS, (128,))
    loss = F.binary_cross_entropy_with_logits(model(user, item), (taste[user, item] > 0).float())
    sparse_opt.zero_grad()
    dense_opt.zero_grad()
    loss.backward()
    sparse_opt.step()  # bug: dense_opt.step() left out
print(f"loss {loss.item():.3f}")
