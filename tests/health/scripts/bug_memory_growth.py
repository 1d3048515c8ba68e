"""Bug: every step's full output is kept 'for the epoch metrics', so host memory keeps rising."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4096))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
outputs = []
for _step in range(100):
    x = torch.randn(128, 64)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, torch.randint(0, 4096, (128,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
    outputs.append(
        logits.detach().clone()
    )  # bug: 2 MB per step; keep the argmax or a running metric
print("kept", len(outputs))
