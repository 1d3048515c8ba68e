"""Bug: the output layer is initialised with a huge scale, so the first loss is far above log(C)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 10))
nn.init.normal_(model[2].weight, std=5.0)  # bug: std 5 instead of the default ~1/sqrt(64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _step in range(10):
    x = torch.randn(64, 32)
    loss = nn.functional.cross_entropy(model(x), torch.randint(0, 10, (64,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
