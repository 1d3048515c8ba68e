"""Clean: a GradScaler gone through both ways in four loops: unscaled before a clip, then
stepped through the scaler; a scaler disabled (enabled=False) beside a plain optimizer.step();
gradients accumulated over four scaled micro-batches; and a GAN whose critic steps through the
scaler while the generator backpropagates its own loss as it is and steps directly."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
w = torch.randn(16)
x = torch.randn(2048, 16)
y = (x @ w > 0).long()


def classifier() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))


def batches():
    for i in range(0, len(x), 64):
        yield x[i : i + 64], y[i : i + 64]


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


# 1. unscale_ to clip, then scaler.step
model = classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")
for xb, yb in batches():
    with autocast():
        loss = F.cross_entropy(model(xb), yb)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()

# 2. a disabled scaler: its scale is 1, the plain step is right
model = classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", enabled=False)
for xb, yb in batches():
    loss = F.cross_entropy(model(xb), yb)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    optimizer.step()

# 3. four scaled micro-batches a step
model = classifier()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
scaler = torch.amp.GradScaler("cpu")
for i, (xb, yb) in enumerate(batches()):
    with autocast():
        loss = F.cross_entropy(model(xb), yb) / 4
    scaler.scale(loss).backward()
    if i % 4 == 3:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

# 4. a GAN: the critic through the scaler, the generator's own loss stepped directly
G = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))
opt_g, opt_d = torch.optim.Adam(G.parameters(), 1e-3), torch.optim.Adam(D.parameters(), 1e-3)
scaler = torch.amp.GradScaler("cpu")
ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
for _step in range(150):
    real, fake = torch.randn(64, 2) * 0.5 + 2, G(torch.randn(64, 4))
    d_loss = F.binary_cross_entropy_with_logits(D(real), ones)
    d_loss = d_loss + F.binary_cross_entropy_with_logits(D(fake.detach()), zeros)
    opt_d.zero_grad()
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    scaler.update()
    g_loss = F.binary_cross_entropy_with_logits(D(fake), ones)
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
print(f"last generator loss {g_loss.item():.3f}")
