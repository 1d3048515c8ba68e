"""Bug: float16 autocast without a loss scaler. Gradients smaller than float16's smallest step
flush to zero in the backward (float16 autocast runs on the CPU too)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(120):
    x = torch.randn(32, 32)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x), (x[:, :4].sum(1) > 0).long())
    opt.zero_grad()
    loss.backward()  # scaler.scale(loss).backward() forgotten
    opt.step()
print("done")
