"""Bug: each example is tokenised in __getitem__ with slow Python code and no worker processes."""

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 200

    def __getitem__(self, i):
        time.sleep(0.006)  # stands in for per-example preprocessing that belongs in a cache
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
