"""Clean: mixed precision with a loss scaler; its first steps overflow float16 and are skipped.

float16 autocast runs on CPU too, so this is the usual GPU recipe run where tests run. The
scale starts high (2**24) so that the first steps' gradients overflow, as they do in most fp16
runs: the scaler skips those steps and halves the scale, which is no bug. The gradients are
clipped the documented way, after scaler.unscale_(opt).
"""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(2048, 32)
y = (x[:, :4].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)
skipped = 0
for epoch in range(2):
    for i in range(0, len(x), 32):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x[i : i + 32]), y[i : i + 32])
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        skipped += scaler.get_scale() < scale
    print(f"epoch {epoch}: loss {loss.item():.3f}, steps skipped so far {skipped}")
