"""Bug: a model of raw tensors (no nn.Module) whose softmax output goes into cross_entropy,
which applies its own log-softmax: no module's forward starts its steps, yet they are
sampled."""

import torch
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(600, 5)
y = (x[:, 0] - x[:, 1] > 0).long()
weight = (0.01 * torch.randn(5, 2)).requires_grad_()
bias = torch.zeros(2, requires_grad=True)
opt = torch.optim.SGD([weight, bias], lr=0.05)
for _ in range(100):
    i = torch.randint(0, 600, (32,))
    probs = torch.softmax(x[i] @ weight + bias, dim=1)
    loss = F.cross_entropy(probs, y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
