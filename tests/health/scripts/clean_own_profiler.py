"""Clean: the script profiles its own training with torch.profiler (the whole run in one
session, as PyTorch's profiler recipe does) and reads the table at the end: the monitor's
profiler windows must not end that session, which would leave the script's table empty."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
steps = 100
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(steps):
        x = torch.randn(64, 32)
        loss = F.cross_entropy(model(x), x[:, :4].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
counts = {e.key: e.count for e in prof.key_averages()}
assert counts.get("aten::addmm") == 2 * steps, counts.get("aten::addmm")  # two Linear layers
print("profiled", counts["aten::addmm"])
