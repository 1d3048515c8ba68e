"""Bug: Adam with lr=1.0, as in bug_loss_diverged.py, with the loss handed to its backward
divided by the gradient accumulation steps, 1 here, as accelerate's ``Accelerator.backward``
and the transformers ``Trainer`` hand it on: the tensor backward runs on is not the
cross-entropy's own, though its value is."""

import torch
from torch import nn
from torch.nn import functional as F


def backward(loss: torch.Tensor, accumulation_steps: int = 1) -> None:
    (loss / accumulation_steps).backward()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1.0)  # bug: 1e-3 was meant
x = torch.randn(2048, 20)
y = x[:, :5].argmax(1)
for _step in range(200):
    i = torch.randint(0, 2048, (32,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    backward(loss)
    opt.step()
print("done")
