"""Bug: log_softmax over dim 0, the batch: each class's scores are normalised against the
other examples, and nll_loss reads them as log-probabilities over the classes."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for _step in range(60):
    x = torch.randn(32, 20)
    loss = F.nll_loss(F.log_softmax(model(x), dim=0), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
