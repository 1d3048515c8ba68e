"""Clean: a best-model copy taken with copy.deepcopy at the epoch whose validation loss is lowest
(training goes on past it, overfitting), and evaluated at the end: older than the model on
purpose, and made after training began."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(21)

# small noisy training set so a wide MLP overfits after a few epochs
W = torch.randn(20, 4)


def make(n, label_noise):
    x = torch.randn(n, 20)
    y = (x @ W).argmax(1)
    flip = torch.rand(n) < label_noise
    y[flip] = torch.randint(0, 4, (int(flip.sum()),))
    return x, y


x_tr, y_tr = make(800, 0.35)
x_val, y_val = make(1000, 0.0)
x_te, y_te = make(2000, 0.0)

model = nn.Sequential(
    nn.Linear(20, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 4)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def evaluate(net, x, y):
    net.eval()
    with torch.no_grad():
        logits = net(x)
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


best_model = copy.deepcopy(model)
best_loss, best_epoch = float("inf"), -1
for epoch in range(25):
    model.train()
    perm = torch.randperm(len(x_tr))
    for i in range(0, len(perm), 32):
        idx = perm[i : i + 32]
        loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    val_loss, val_acc = evaluate(model, x_val, y_val)
    if val_loss < best_loss:
        best_loss, best_epoch = val_loss, epoch
        best_model = copy.deepcopy(model)
    print(
        f"epoch {epoch:2d} train_loss {loss.item():.3f} val_loss {val_loss:.4f} val_acc {val_acc:.4f}"
    )

print(f"best epoch {best_epoch} (val_loss {best_loss:.4f})")
_, best_acc = evaluate(best_model, x_te, y_te)
_, model_acc = evaluate(model, x_te, y_te)
print(f"HELDOUT best_acc {best_acc:.4f}")
print(f"HELDOUT model_acc {model_acc:.4f}")
