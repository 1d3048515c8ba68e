"""Bug: a binary classifier with one output logit (trained with BCEWithLogitsLoss) scored with
argmax over its classes' dim, as multi-class code does: the dim has size 1, every prediction
is class 0, and the validation accuracy is the share of class 0 whatever the model learned."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2400, 16)
y = (x[:, 0] * x[:, 1] + x[:, 2] > 0).float()
train_x, train_y = x[:2000], y[:2000]
val_x, val_y = x[2000:], y[2000:]
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(6):
    model.train()
    for i in range(0, 2000, 50):
        logits = model(train_x[i : i + 50]).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(logits, train_y[i : i + 50])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        out = model(val_x)
        pred = out.argmax(dim=1)  # bug: pred = (out.squeeze(1) > 0).float()
        acc = (pred == val_y).float().mean().item()
        true = ((out.squeeze(1) > 0).float() == val_y).float().mean().item()
    print(f"epoch {epoch}: validation accuracy {acc:.3f} (by the sign of the logit: {true:.3f})")
