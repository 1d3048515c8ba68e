"""Bug: the split clipping API with a loss scaler: the total norm is taken (and logged) right
after the scaled backward, then scaler.unscale_(opt), then clip_grads_with_norm_ is given the
norm of the scaled gradients (65,536 times too large), so every step is cut to a sliver."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for _step in range(60):
    x = torch.randn(32, 20)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), (x[:, 0] > 0).long())
    opt.zero_grad()
    scaler.scale(loss).backward()
    total_norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # still scaled
    scaler.unscale_(opt)
    torch.nn.utils.clip_grads_with_norm_(params, 1.0, total_norm)
    scaler.step(opt)
    scaler.update()
print("done")
