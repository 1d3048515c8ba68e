"""Bug: torch.manual_seed(0) inside the training loop (in a helper that builds each batch):
every step draws the same random numbers, so dropout drops the same units and the noise added
for augmentation is the same on every step."""

import torch
from torch import nn
from torch.nn import functional as F

x_all = torch.randn(4096, 20)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)  # meant to make the run reproducible
    x = x_all[step * 32 % 4096 :][:32]
    return x + 0.1 * torch.randn_like(x), x[:, :5].argmax(1)


model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(100):
    inputs, labels = batch(step)
    loss = F.cross_entropy(model(inputs), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
