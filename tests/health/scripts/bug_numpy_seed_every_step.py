"""Bug: numpy.random.seed(0) inside the batch function that augments with NumPy noise and
picks the batch's examples: every step draws the same noise and the same 32 examples, so the
model sees one batch, jittered the same way, for the whole run."""

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

x_all = np.random.default_rng(1).standard_normal((4096, 20)).astype(np.float32)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    np.random.seed(0)  # meant to make the run reproducible
    rows = np.random.choice(len(x_all), 32, replace=False)
    x = x_all[rows] + 0.1 * np.random.standard_normal((32, 20)).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(x_all[rows, :5].argmax(1))


model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(100):
    inputs, labels = batch()
    loss = F.cross_entropy(model(inputs), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
