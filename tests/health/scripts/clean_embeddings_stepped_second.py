"""Clean: a click model whose large embedding tables have their own Adam, stepped after the
dense layers' Adam: the second step runs between the first optimiser's step and the next
batch, and is compute, not a wait for data (batches are slices of tensors in memory). It read
as input-bound: the embeddings' step counted as the wait."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
U, D, N, B = 50_000, 32, 100_000, 256
taste = torch.randn(U, 8)
users, items = torch.randint(0, U, (N,)), torch.randint(0, U, (N,))
clicks = torch.bernoulli(torch.sigmoid((taste[users] * taste[items]).sum(1) / 2))


class Clicks(nn.Module):
    def __init__(self):
        super().__init__()
        self.user, self.item = nn.Embedding(U, D), nn.Embedding(U, D)
        self.mlp = nn.Sequential(nn.Linear(2 * D, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, u, i):  # [B], [B] -> [B] logits
        eu, ei = self.user(u), self.item(i)  # [B, D] each
        return self.mlp(torch.cat([eu, ei], 1)).squeeze(1) + (eu * ei).sum(1)


model = Clicks()
dense = torch.optim.Adam(model.mlp.parameters(), lr=1e-3)
tables = torch.optim.Adam([model.user.weight, model.item.weight], lr=1e-2)
for step in range(120):
    k = step * B % (N - B)
    loss = F.binary_cross_entropy_with_logits(
        model(users[k : k + B], items[k : k + B]), clicks[k : k + B]
    )
    dense.zero_grad()
    tables.zero_grad()
    loss.backward()
    dense.step()
    tables.step()
print(round(loss.item(), 3))
