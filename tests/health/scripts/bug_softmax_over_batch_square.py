"""Bug: log_softmax over dim 0, the batch, with a batch of 10 examples and 10 classes: the two
dims have the same size, so only the dim the log_softmax was called with tells the batch from
the classes."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for _step in range(60):
    x = torch.randn(10, 20)
    log_probs = F.log_softmax(model(x), dim=0)  # [10, 10]: dim 0 is the batch
    loss = F.nll_loss(log_probs, x[:, :10].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
