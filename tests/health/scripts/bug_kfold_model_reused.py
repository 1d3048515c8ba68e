"""Bug: 5-fold cross-validation that builds the model once, before the fold loop, and only a
new optimiser per fold: each fold goes on from the weights the folds before it trained, on
rows that include its validation fold, so its validation score is no held-out score (the
validation accuracy before a fold's training climbs from chance to 0.95 by the last fold)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
N = 600
x = torch.randn(N, 20)
y = (torch.tanh(x @ torch.randn(20, 4)) + 0.3 * x[:, :4] ** 2).argmax(1)
noisy = torch.rand(N) < 0.25
y[noisy] = torch.randint(4, (int(noisy.sum()),))
folds = torch.randperm(N).chunk(5)
model = nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 4))  # bug: built once
scores = []
for k in range(5):
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    held_out = folds[k]
    training = torch.cat([folds[j] for j in range(5) if j != k])
    with torch.no_grad():
        before = (model(x[held_out]).argmax(1) == y[held_out]).float().mean().item()
    for _step in range(60):
        batch = training[torch.randint(len(training), (64,))]
        loss = F.cross_entropy(model(x[batch]), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        scores.append((model(x[held_out]).argmax(1) == y[held_out]).float().mean().item())
    print(f"fold {k}: validation accuracy {before:.3f} before training, {scores[-1]:.3f} after")
print(f"cross-validated accuracy {sum(scores) / len(scores):.3f}")
