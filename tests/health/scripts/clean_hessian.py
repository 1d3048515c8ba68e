"""Clean: an AdaHessian-style step: backward(create_graph=True), a Hessian-vector product
from the gradients, and gradients replaced by detached ones before the step, so no graph
outlives its step although every backward keeps it for the second derivative."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 3))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.05)
x = torch.randn(512, 10)
y = x[:, :3].argmax(1)
for _ in range(90):
    i = torch.randint(0, 512, (32,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad(set_to_none=True)
    loss.backward(create_graph=True)
    grads = [p.grad for p in params]
    signs = [torch.randint_like(p, 2) * 2 - 1 for p in params]
    hessian_v = torch.autograd.grad(grads, params, grad_outputs=signs)
    with torch.no_grad():
        for p, g, h, z in zip(params, grads, hessian_v, signs, strict=True):
            p.grad = g.detach() / ((h * z).abs() + 0.1)
    opt.step()
print(round(loss.item(), 3))
