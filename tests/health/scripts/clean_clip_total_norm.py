"""Clean: the split clipping API (torch.nn.utils.get_total_norm, then clip_grads_with_norm_)
in the right places: between backward and step; with a GradScaler on CPU under bfloat16 and
float16 autocast, after scaler.unscale_(opt); and a scaled norm read before unscale_ only to
log it, the clip given the norm taken again after it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(32, 20)
    return x, x[:, :5].argmax(1)


for _step in range(60):  # full precision
    x, y = batch()
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    total_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    torch.nn.utils.clip_grads_with_norm_(params, max_norm=1.0, total_norm=total_norm)
    opt.step()
for dtype in (torch.bfloat16, torch.float16):  # a loss scaler, unscaled before the clip
    for _step in range(60):
        x, y = batch()
        with torch.autocast("cpu", dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaled = torch.nn.utils.get_total_norm(p.grad for p in params)  # logged, as it is
        scaler.unscale_(opt)
        total_norm = torch.nn.utils.get_total_norm(p.grad for p in params)
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), 1.0, total_norm)
        scaler.step(opt)
        scaler.update()
print("done")
