"""Bug: ``next(iter(loader))`` above the loop, so the model trains on one batch of 32
examples for every step: training loss near zero, held out 0.47 after 300 steps, where drawing
a new batch each step (``for x, y in loader``, epoch after epoch) gives 0.86."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 6))
with torch.no_grad():
    features = torch.randn(4000, 20)
    labels = teacher(features).argmax(1)
train = TensorDataset(features[:3000], labels[:3000])
loader = DataLoader(train, batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 6))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
x, y = next(iter(loader))  # bug: one batch for the run; draw one in the loop
for _step in range(300):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    accuracy = (model(features[3000:]).argmax(1) == labels[3000:]).float().mean().item()
print(f"training loss {loss.item():.3f}, held-out accuracy {accuracy:.2f}")
