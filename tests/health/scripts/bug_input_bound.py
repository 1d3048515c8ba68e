"""Bug: each example is tokenised in __getitem__ with slow Python code and no worker processes."""

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 192

    def __getitem__(self, i):
        # Stands in for per-example preprocessing that belongs in a cache: 8 x 12 ms = ~100 ms
        # of waiting per batch against well under 10 ms of compute, even on a busy machine.
        time.sleep(0.012)
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), i % 2


model = nn.Linear(16, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Slow(), batch_size=8):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
