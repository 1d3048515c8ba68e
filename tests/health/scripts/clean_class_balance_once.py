"""Clean: the classes balanced once. A WeightedRandomSampler balances two data sources (80% of
the rows from one, 20% from the other, with the same label mix), not the classes, so the
batches keep the data's 15% positives, which pos_weight = negatives / positives then balances;
and a second model is trained on class-balanced batches with a plain loss."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

torch.manual_seed(0)
n = 8000
source = (torch.rand(n) < 0.2).long()
y = (torch.rand(n) < 0.15).float()
x = torch.randn(n, 8) + y[:, None] * torch.randn(8) + source[:, None] * torch.randn(8)
by_source = torch.bincount(source, minlength=2).float()
sampler = WeightedRandomSampler(1.0 / by_source[source], num_samples=n)
loader = DataLoader(TensorDataset(x, y), batch_size=128, sampler=sampler)
positives = y.sum()
criterion = nn.BCEWithLogitsLoss(pos_weight=(n - positives) / positives)
model = nn.Sequential(
    nn.Linear(8, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _epoch in range(4):
    for xb, yb in loader:
        loss = criterion(model(xb).squeeze(1), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

labels = y.long()
by_class = torch.bincount(labels, minlength=2).float()
balanced = DataLoader(
    TensorDataset(x, labels),
    batch_size=128,
    sampler=WeightedRandomSampler(1.0 / by_class[labels], num_samples=n),
)
second = nn.Sequential(
    nn.Linear(8, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2)
)
second_optimizer = torch.optim.Adam(second.parameters(), lr=1e-3)
for _epoch in range(4):
    for xb, yb in balanced:
        loss = F.cross_entropy(second(xb), yb)
        second_optimizer.zero_grad()
        loss.backward()
        second_optimizer.step()
with torch.no_grad():
    first_rate = (model(x).squeeze(1) > 0).float().mean().item()
    second_rate = second(x).argmax(1).float().mean().item()
print(
    f"HELDOUT predicted positive share {first_rate:.3f} and {second_rate:.3f} (data {y.mean():.3f})"
)
