"""Bug: a Dataset that decodes each example slowly in the main process (num_workers=0), in a
loop that updates its weights by hand: nearly all of each step is spent waiting for data."""

import time

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class SlowDecode(Dataset):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.0005)  # bug: expensive decoding, no DataLoader workers
        x = torch.randn(16, generator=torch.Generator().manual_seed(i))
        return x, int(x[:3].sum() > 0)


model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
for xb, yb in DataLoader(SlowDecode(), batch_size=32, shuffle=True):
    loss = F.cross_entropy(model(xb), yb)
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
print(round(loss.item(), 3))
