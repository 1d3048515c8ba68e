"""Bug: a hand-written squared error of a prediction [N, 1] against a target [N]: the
difference broadcasts to [N, N] and the model learns the mean target (torch says nothing)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(100):
    x = torch.randn(32, 20)
    y = x[:, 0] - x[:, 1]  # [32]
    loss = ((model(x) - y) ** 2).mean()  # [32, 1] - [32] is [32, 32]
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
