"""Bug: a WeightedRandomSampler meant to balance two classes given the classes' weights, not
one per example: with 2 weights over 2,000 examples it draws examples 0 and 1 only, and the
model learns those two."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

torch.manual_seed(0)
x = torch.randn(2000, 10)
y = (x[:, 0] + 0.5 * x[:, 1] > 1.2).long()  # about 15% positive
counts = torch.bincount(y)
sampler = WeightedRandomSampler(1.0 / counts.float(), num_samples=2000)  # bug: (1 / counts)[y]
loader = DataLoader(TensorDataset(x, y), batch_size=64, sampler=sampler)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for _epoch in range(4):
    for inputs, labels in loader:
        loss = F.cross_entropy(model(inputs), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
with torch.no_grad():
    accuracy = (model(x).argmax(1) == y).float().mean().item()
print(f"training loss {loss.item():.4f}, accuracy on all the data {accuracy:.3f}")
