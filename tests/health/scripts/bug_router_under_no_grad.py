"""Bug: a mixture of experts computes its router's scores under torch.no_grad() (to save
memory, its author thought), so the router never trains: its layer runs on every forward and
gets no gradient. unused-parameter says that it runs, and under no_grad."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class Experts(nn.Module):
    def __init__(self, d: int = 16, n: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(d, n)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(n))
        self.head = nn.Linear(d, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # bug: the router's scores need their gradient
            weights = F.softmax(self.router(x), -1)  # [B, n]
        mixed = sum(w[:, None] * e(x) for w, e in zip(weights.T, self.experts, strict=True))
        return self.head(torch.relu(mixed))


model = Experts()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for _step in range(150):
    x = torch.randn(64, 16)
    loss = F.cross_entropy(model(x), (x[:, 0] > 0).long() + (x[:, 1] > 1).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.3f}")
