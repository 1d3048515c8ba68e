"""Bug: a loop that updates its raw-tensor parameters by hand (no torch.optim optimiser)
adds up loss tensors for its running mean, so every step's graph stays alive."""

import torch
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, :3].sum(1) > 0).long()
w1 = (torch.randn(16, 32) / 4).requires_grad_()
w2 = (torch.randn(32, 2) / 6).requires_grad_()
running = 0
for _step in range(60):
    i = torch.randint(0, 1024, (32,))
    loss = F.cross_entropy(torch.tanh(x[i] @ w1) @ w2, y[i])
    for p in (w1, w2):
        p.grad = None
    loss.backward()
    for p in (w1, w2):
        p.data += -0.1 * p.grad
    running += loss  # bug: should be loss.item()
print("mean loss", float(running) / 60)
