"""Bug: retain_graph=True added to silence an error, on every step, with no second backward."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for _step in range(40):
    x = torch.randn(32, 16)
    loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
print("done")
