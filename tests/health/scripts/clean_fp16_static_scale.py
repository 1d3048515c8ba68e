"""Clean: float16 autocast with a static loss scale applied by hand, as older mixed-precision
recipes (and some libraries' own scalers) do: the loss is multiplied by 1024 before its
backward and the gradients divided by it before the step, so small gradients survive
float16's range as they do under ``GradScaler``."""

import torch
from torch import nn

LOSS_SCALE = 1024.0

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(120):
    x = torch.randn(32, 32)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x), (x[:, :4].sum(1) > 0).long())
    opt.zero_grad()
    (loss.float() * LOSS_SCALE).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if all(torch.isfinite(g).all() for g in grads):  # an overflow skips the step
        for g in grads:
            g.div_(LOSS_SCALE)
        opt.step()
    if step % 40 == 0:
        print(f"step {step}: loss {loss.item():.3f}")
