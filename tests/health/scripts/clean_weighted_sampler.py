"""Clean: a WeightedRandomSampler balancing two classes with one weight per example (the
weight of its class), and one over a subset of the data through a Subset."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset, WeightedRandomSampler

torch.manual_seed(0)
x = torch.randn(2000, 10)
y = (x[:, 0] + 0.5 * x[:, 1] > 1.2).long()  # about 15% positive
data = TensorDataset(x, y)
balanced = WeightedRandomSampler((1.0 / torch.bincount(y).float())[y], num_samples=2000)
subset = Subset(data, range(500))
first = WeightedRandomSampler(torch.ones(500), num_samples=500)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for loader in (
    DataLoader(data, batch_size=64, sampler=balanced),
    DataLoader(subset, 64, sampler=first),
):
    for _epoch in range(2):
        for inputs, labels in loader:
            loss = F.cross_entropy(model(inputs), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
with torch.no_grad():
    accuracy = (model(x).argmax(1) == y).float().mean().item()
print(f"training loss {loss.item():.4f}, accuracy on all the data {accuracy:.3f}")
