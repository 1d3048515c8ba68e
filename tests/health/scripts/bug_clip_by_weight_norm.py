"""Bug: the split clipping API given the parameters' norm: get_total_norm takes tensors, so
get_total_norm(model.parameters()) is the norm of the weights, not of their gradients, and
clip_grads_with_norm_ scales every step's gradients by max_norm over it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for _step in range(100):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    total_norm = torch.nn.utils.get_total_norm(model.parameters())  # bug: the weights' norm
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), 1.0, total_norm)
    opt.step()
print("done")
