"""Bug: FGSM adversarial training whose attack helper puts the model in eval mode to craft
the perturbation and never puts it back. The loop calls ``model.train()`` at each epoch's
start, but the helper runs before every training forward, so every step trains with dropout
off and batch norm frozen at its running statistics. Found once ``model.train()`` has been seen
undone before the forwards (the second epoch; the first epoch's call comes before the models
are known), at the helper's ``model.eval()``."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
torch.manual_seed(0)
N, D, C = 4096, 32, 10
centers = torch.randn(C, D) * 0.8
y_all = torch.randint(0, C, (N,))
x_all = centers[y_all] + torch.randn(N, D)
loader = DataLoader(
    TensorDataset(x_all[:3584], y_all[:3584]), batch_size=64, shuffle=True, drop_last=True
)
val_x, val_y = x_all[3584:], y_all[3584:]
model = nn.Sequential(
    nn.Linear(D, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, C)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def fgsm(model, x, y, eps=0.3):
    model.eval()  # bug: the caller's train mode is not restored
    x = x.clone().requires_grad_(True)
    grad = torch.autograd.grad(F.cross_entropy(model(x), y), x)[0]
    return (x + eps * grad.sign()).detach()


for epoch in range(2):
    model.train()
    for x, y in loader:
        loss = F.cross_entropy(model(fgsm(model, x, y)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(val_x).argmax(1) == val_y).float().mean()
    print(f"epoch {epoch} loss {loss.item():.4f} val acc {acc:.3f}")
