"""Clean: block-coordinate descent, two optimisers over the two halves of one model stepping
in turn, the model's gradients cleared before each backward: each backward is its optimiser's
own, not a micro-batch of the other's (zero-grad-per-micro-batch was reported)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x, w = torch.randn(2000, 20), torch.randn(20, 4)
y = (torch.tanh(x @ w) + 0.3 * x[:, :4] ** 2).argmax(1)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
first = torch.optim.Adam(model[0].parameters(), lr=3e-3)
second = torch.optim.Adam(model[2].parameters(), lr=3e-3)
for step in range(200):
    batch = torch.randint(0, 2000, (64,))
    loss = F.cross_entropy(model(x[batch]), y[batch])
    model.zero_grad()
    loss.backward()
    (first if step % 2 == 0 else second).step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f}")
