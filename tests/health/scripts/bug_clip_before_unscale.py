"""Bug: gradients clipped with a loss scaler in use but before scaler.unscale_(opt): the limit
of 1.0 applies to the gradients times the scale (65,536), so every step is cut to a sliver."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for _step in range(60):
    x = torch.randn(32, 20)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), (x[:, 0] > 0).long())
    opt.zero_grad()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # scaler.unscale_(opt) forgotten
    scaler.step(opt)
    scaler.update()
print("done")
