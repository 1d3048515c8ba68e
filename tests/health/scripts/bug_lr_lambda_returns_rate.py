"""Bug: a warm-up written as a LambdaLR whose lambda returns the learning rate itself
(lr * min(1, step / warmup)), over an optimiser given that rate too. LambdaLR multiplies the
optimiser's lr by what the lambda returns, so the run trains at lr * lr = 1e-6."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
direction = torch.randn(20, 1)
x = torch.randn(3000, 20)
y = (x @ direction).squeeze(1).gt(0).long()
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
lr, warmup = 1e-3, 50
opt = torch.optim.Adam(model.parameters(), lr=lr)
scheduler = torch.optim.lr_scheduler.LambdaLR(
    opt,
    lambda step: lr * min(1.0, (step + 1) / warmup),  # bug: min(1.0, (step + 1) / warmup)
)
for _ in range(300):
    i = torch.randint(0, 2000, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
    scheduler.step()
with torch.no_grad():
    print(f"held-out accuracy {(model(x[2000:]).argmax(1) == y[2000:]).float().mean():.2f}")
