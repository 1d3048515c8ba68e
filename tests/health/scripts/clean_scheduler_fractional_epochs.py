"""Clean: schedulers given values that are epochs. A CosineAnnealingLR stepped after every
batch with the fractional epoch, `scheduler.step(epoch + (b + 1) / batches)` (its closed form
takes fractions; the deprecated argument, used rightly), while the validation loss goes to a
ReduceLROnPlateau over the same optimiser's second group (the one scheduler that takes a
metric) and to early stopping."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 4))
x = torch.randn(2500, 10)
with torch.no_grad():
    y = teacher(x).argmax(1)
x, y, x_val, y_val = x[:2000], y[:2000], x[2000:], y[2000:]
body = nn.Sequential(nn.Linear(10, 128), nn.ReLU())
head = nn.Linear(128, 4)
optimizer = torch.optim.SGD(body.parameters(), lr=0.2, momentum=0.9)
head_optimizer = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)
epochs, batches = 12, 63
cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(head_optimizer, patience=1)
best, waited = float("inf"), 0
for epoch in range(epochs):
    order = torch.randperm(len(x))
    for b in range(batches):
        batch = order[b * 32 : (b + 1) * 32]
        loss = F.cross_entropy(head(body(x[batch])), y[batch])
        optimizer.zero_grad()
        head_optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        head_optimizer.step()
        cosine.step(epoch + (b + 1) / batches)
    with torch.no_grad():
        val_loss = F.cross_entropy(head(body(x_val)), y_val).item()
    plateau.step(val_loss)
    best, waited = (val_loss, 0) if val_loss < best else (best, waited + 1)
    if waited > 3:
        break
print(f"HELDOUT val_loss {val_loss:.4f} lr {optimizer.param_groups[0]['lr']:.3g}")
