"""Clean: the weights' norm taken with get_total_norm(model.parameters()) (and of a list of
them) only to log it, between the gradients' norm and the clip given that one."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
weight_norms = []
for _step in range(100):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    weight_norms.append(torch.nn.utils.get_total_norm(model.parameters()).item())
    torch.nn.utils.clip_grads_with_norm_(params, 1.0, grad_norm)
    opt.step()
    weight_norms.append(torch.nn.utils.get_total_norm(params).item())
print("weight norm", round(weight_norms[-1], 3))
