"""Clean: a graph convolutional network whose adjacency module returns a sparse matrix
(D^-1/2 (A + I) D^-1/2 as a COO tensor), multiplied in with torch.sparse.mm. The sampled
steps' output hooks meet a sparse tensor, which has no mean or isfinite, and pass it by."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
N = 200


class NormalizedAdjacency(nn.Module):
    def forward(self, edges: torch.Tensor, n: int) -> torch.Tensor:
        loops = torch.arange(n).repeat(2, 1)
        both = torch.cat([edges, edges.flip(0), loops], 1)
        degree = torch.zeros(n).index_add_(0, both[0], torch.ones(both.size(1)))
        weight = degree[both[0]].rsqrt() * degree[both[1]].rsqrt()
        return torch.sparse_coo_tensor(both, weight, (n, n)).coalesce()


class GCN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.adjacency = NormalizedAdjacency()
        self.l1 = nn.Linear(16, 32)
        self.l2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        a = self.adjacency(edges, x.size(0))
        h = F.relu(torch.sparse.mm(a, self.l1(x)))
        return torch.sparse.mm(a, self.l2(F.dropout(h, 0.5, self.training)))


with torch.sparse.check_sparse_tensor_invariants(False):
    edges = torch.randint(0, N, (2, 800))
    x = torch.randn(N, 16)
    y = (x[:, :4] + 0.5 * torch.randn(N, 4)).argmax(1)
    train = torch.rand(N) < 0.5
    model = GCN()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _epoch in range(100):
        opt.zero_grad()
        loss = F.cross_entropy(model(x, edges)[train], y[train])
        loss.backward()
        opt.step()
print(f"{loss.item():.3f}")
