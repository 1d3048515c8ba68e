"""Bug: the split clipping API (torch.nn.utils.get_total_norm, then clip_grads_with_norm_)
called between zero_grad() and backward(): there is no gradient to clip yet, and every step
applies the fresh ones unclipped."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
for _step in range(120):
    x = torch.randn(32, 20)
    opt.zero_grad()
    grads = [p.grad for p in params if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm(grads)
    torch.nn.utils.clip_grads_with_norm_(params, 1.0, total_norm)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    loss.backward()
    opt.step()
print("done")
