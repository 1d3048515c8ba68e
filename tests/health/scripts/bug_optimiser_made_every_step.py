"""Bug: the optimiser made inside the training loop: each step's Adam starts with its moment
estimates at zero, so every step is Adam's first, bias-corrected one (about lr x the sign of
each gradient) and nothing is averaged over steps."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
for _step in range(120):
    x = torch.randn(32, 20)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # made anew each step
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done", round(loss.item(), 3))
