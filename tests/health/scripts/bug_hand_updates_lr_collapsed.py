"""Bug: a learning-rate decay by hand meant once an epoch (``lr *= 0.97``) indented into the
batch loop: after ~300 of its 640 batches the weights updated by hand barely move."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, :3].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 2))
lr = 0.5
for _epoch in range(20):
    for _batch in range(32):
        i = torch.randint(0, 1024, (32,))
        loss = F.cross_entropy(model(x[i]), y[i])
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
                p.grad = None
        lr *= 0.97  # bug: meant once an epoch, one level out
print(round(loss.item(), 3), f"{lr:.2g}")
