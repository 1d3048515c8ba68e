"""Bug: next(iter(loader)) inside the training loop. Each step makes a new iterator of a loader
that does not shuffle, so every step trains on the same first batch."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(2048, 20)
data = TensorDataset(x, x[:, :5].argmax(1))
loader = DataLoader(data, batch_size=32)  # shuffle=False: the same order every time
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(100):
    inputs, labels = next(iter(loader))  # always batch 0
    loss = F.cross_entropy(model(inputs), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
