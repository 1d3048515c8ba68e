"""Clean: hard-example mining. Each step scores a pool of 1024 examples under no_grad
(per-example cross-entropy) and trains on its 32 hardest; with 10% of the labels noisy, the
hardest are those the model cannot fit, and it learns to predict them uniformly, so the loss
it trains on sits at log(C) all run while the model learns (clean accuracy ~0.65 against 0.2
for chance). Not loss-at-chance: the loss's level is that of the examples picked by it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
C = 5
x = torch.randn(5000, 20)
y = x[:, :C].argmax(1)
noisy = torch.rand(5000) < 0.1
y[noisy] = torch.randint(0, C, (int(noisy.sum()),))
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, C))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for _step in range(300):
    pool = torch.randint(0, 5000, (1024,))
    with torch.no_grad():
        per_example = F.cross_entropy(model(x[pool]), y[pool], reduction="none")
    hard = pool[per_example.topk(32).indices]
    loss = F.cross_entropy(model(x[hard]), y[hard])
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    accuracy = (model(x[~noisy]).argmax(1) == y[~noisy]).float().mean()
print(f"clean accuracy {accuracy:.3f}")
