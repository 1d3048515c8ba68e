"""Clean: two optimisers over the same parameters, each with its own objective, the one that
steps every 4th step stepping first: SGD on a smoothness term, then Adam on the task. Adam's
first step was taken for a new optimiser replacing SGD's, and SGD's next for the first taking
the clock back (44 steps of 160 counted, the smoothness term's loss read as the run's)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x, w = torch.randn(2000, 20), torch.randn(20, 4)
y = (torch.tanh(x @ w) + 0.3 * x[:, :4] ** 2).argmax(1)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
task = torch.optim.Adam(model.parameters(), lr=3e-3)
smoothing = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(160):
    batch = torch.randint(0, 2000, (64,))
    inputs, labels = x[batch], y[batch]
    if step % 4 == 0:
        nearby = F.mse_loss(model(inputs + 0.1 * torch.randn_like(inputs)), model(inputs).detach())
        smoothing.zero_grad()
        nearby.backward()
        smoothing.step()
    loss = F.cross_entropy(model(inputs), labels)
    task.zero_grad()
    loss.backward()
    task.step()
    if step % 40 == 0:
        print(f"step {step} loss {loss.item():.3f}")
