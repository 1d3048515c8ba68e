"""Clean: a physics-informed network fitted by hand, no optimiser: each step takes du/dx of
``u.sum()`` with respect to the input (create_graph=True), then the gradient of the loss, the
residual of u' = cos(x) plus u(0) = 0, with respect to the weights, applied as p -= lr * g.
The step's loss is the second, not the first scalar given to torch.autograd.grad."""

import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
losses = []
for _step in range(200):
    x = (torch.rand(64, 1) * 2 - 1).requires_grad_(True)
    u = net(x)
    du = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
    loss = (du - torch.cos(x)).pow(2).mean() + net(torch.zeros(1, 1)).pow(2).mean()
    grads = torch.autograd.grad(loss, list(net.parameters()))
    with torch.no_grad():
        for p, g in zip(net.parameters(), grads, strict=True):
            p -= 0.05 * g
    losses.append(round(loss.item(), 6))
print("losses", *losses)
