"""Bug: autograd's anomaly detection left on from a NaN hunt. Every forward op records its
traceback and every backward op checks its output for NaN: each step is several times
slower."""

import torch
from torch import nn
from torch.nn import functional as F

torch.autograd.set_detect_anomaly(True)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(60):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
