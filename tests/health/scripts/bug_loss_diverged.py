"""Bug: Adam with lr=1.0 (a thousand times its usual rate): the loss leaves chance level within
a few steps and climbs to tens of times log(C), finite all the while, as the model turns
confidently wrong."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1.0)  # bug: 1e-3 was meant
x = torch.randn(2048, 20)
y = x[:, :5].argmax(1)
for _step in range(200):
    i = torch.randint(0, 2048, (32,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
