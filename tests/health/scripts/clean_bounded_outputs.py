"""Clean: regression losses over bounded outputs whose targets are in reach: an autoencoder
ending in a sigmoid over pixels in [0, 1] (a few a rounding step past 1); ratings from 1 to 5
predicted as 1 + 4 * sigmoid (a product, no sigmoid's output); a tanh over targets in [-1, 1];
a ReLU over counts; a sigmoid over coordinates whose missing ones, -1, are masked out of a loss
taken with reduction="none"; a sigmoid whose targets were jittered out of [0, 1] for the first
steps only. Each trains on every step."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
N = 1024
x = torch.randn(N, 8)
pixels = torch.sigmoid(x @ torch.randn(8, 16))
pixels[pixels > 0.999] = 1.0000001  # stored past 1 by rounding
ratings = 1 + 4 * torch.sigmoid(x[:, :2].sum(1, keepdim=True))
signed = torch.tanh(x[:, 2:4])
counts = torch.poisson((x[:, 4:5] + 2).clamp(min=0.1))
coords = torch.sigmoid(x[:, 5:7])
coords[torch.rand(N, 2) < 0.3] = -1.0  # missing

net = nn.ModuleDict(
    {
        "ae": nn.Sequential(nn.Linear(16, 4), nn.Tanh(), nn.Linear(4, 16), nn.Sigmoid()),
        "rating": nn.Linear(8, 1),
        "signed": nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2), nn.Tanh()),
        "count": nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1), nn.ReLU()),
        "coords": nn.Linear(8, 2),
        "jittered": nn.Linear(8, 2),
    }
)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
for step in range(120):
    i = torch.randint(0, N, (64,))
    xb = x[i]
    jitter = max(0.0, 1 - step / 20) * torch.randn(64, 2)  # annealed away by step 20
    known = (coords[i] >= 0).float()
    losses = {
        "ae": F.mse_loss(net["ae"](pixels[i]), pixels[i]),
        "rating": F.mse_loss(1 + 4 * torch.sigmoid(net["rating"](xb)), ratings[i]),
        "signed": F.smooth_l1_loss(net["signed"](xb), signed[i]),
        "count": F.mse_loss(net["count"](xb), counts[i]),
        "coords": (
            F.mse_loss(torch.sigmoid(net["coords"](xb)), coords[i], reduction="none") * known
        ).sum()
        / known.sum(),
        "jittered": F.mse_loss(torch.sigmoid(net["jittered"](xb)), coords[i].abs() + jitter),
    }
    optimizer.zero_grad()
    sum(losses.values()).backward()
    optimizer.step()
    if step % 40 == 0:
        print(step, {k: round(v.item(), 3) for k, v in losses.items()})
