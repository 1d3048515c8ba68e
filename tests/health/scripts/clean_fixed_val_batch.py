"""Clean: a shuffled training loader, and next(iter(val)) after each step for a fixed batch
to watch the validation loss by: that loader is remade every step on purpose, and trains
nothing."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(2000, 10)
y = x[:, :3].argmax(1)
train = DataLoader(TensorDataset(x[:1600], y[:1600]), batch_size=32, shuffle=True)
val = DataLoader(TensorDataset(x[1600:], y[1600:]), batch_size=64)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
watched = []
for _epoch in range(2):
    for xb, yb in train:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        vx, vy = next(iter(val))
        model.eval()
        with torch.no_grad():
            watched.append(F.cross_entropy(model(vx), vy).item())
        model.train()
print(round(watched[-1], 3))
