"""Bug: class weights for an imbalanced cross-entropy set to the classes' frequencies, where
their inverse was meant: the common class weighs 0.7 and the rare one 0.1, so the rare class
is recognised even less often than without weights."""

import torch
from torch import nn

torch.manual_seed(0)
n = 6000
y = torch.multinomial(torch.tensor([0.7, 0.2, 0.1]), n, replacement=True)
centres = torch.randn(3, 10) * 0.6
x = torch.randn(n, 10) + centres[y]  # classes overlap: how they are weighed decides
counts = torch.bincount(y[:5000], minlength=3).float()
criterion = nn.CrossEntropyLoss(weight=counts / counts.sum())  # bug: counts.sum() / counts
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _epoch in range(4):
    for i in range(0, 5000, 64):
        loss = criterion(model(x[i : i + 64]), y[i : i + 64])
        opt.zero_grad()
        loss.backward()
        opt.step()
with torch.no_grad():
    predicted = model(x[5000:]).argmax(1)
truth = y[5000:]
recalls = [(predicted[truth == c] == c).float().mean().item() for c in range(3)]
print(f"held-out recall by class {[round(r, 3) for r in recalls]}, balanced {sum(recalls) / 3:.3f}")
