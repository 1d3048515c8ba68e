"""Clean: an energy-distance loss compares every generated sample with every data sample on
purpose (x[:, None] - y[None, :], [N, 1] against [1, N]), which is not a slip of shapes."""

import torch
from torch import nn

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(generator.parameters(), lr=1e-3)
data = torch.cat([torch.randn(5000) * 0.5 - 2, torch.randn(5000) * 0.5 + 2])
for _ in range(150):
    x = generator(torch.randn(64, 4)).squeeze(-1)  # [N]
    y = data[torch.randint(0, len(data), (64,))]  # [N]
    loss = (x[:, None] - y[None, :]).abs().mean() - 0.5 * (x[:, None] - x[None, :]).abs().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
