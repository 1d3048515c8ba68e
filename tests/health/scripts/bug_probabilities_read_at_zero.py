"""Bug: a model ending in nn.Sigmoid, trained with BCELoss (its output is a probability), read
at 0 as if it were a logit: every probability is above 0, every prediction positive, and the
accuracy is the share of positives (0.17) where 0.5 scores 0.93."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(6)
D = 14


def make_transactions(n):
    x = torch.randn(n, D)
    s = x[:, :4].sum(1) - 0.7 * x[:, 4] ** 2 - 1.5
    y = (s + 0.6 * torch.randn(n) > 0).float()
    return x, y.unsqueeze(1)


x_tr, y_tr = make_transactions(5000)
x_te, y_te = make_transactions(2000)
loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=128, shuffle=True)

model = nn.Sequential(
    nn.Linear(D, 64),
    nn.ReLU(),
    nn.Dropout(0.1),
    nn.Linear(64, 1),
    nn.Sigmoid(),
)
criterion = nn.BCELoss()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

for epoch in range(12):
    model.train()
    epoch_loss = 0.0
    for xb, yb in loader:
        out = model(xb)
        loss = criterion(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        epoch_loss += loss.item() * len(xb)
    if epoch % 4 == 3:
        print(f"epoch {epoch} loss {epoch_loss / len(x_tr):.4f}")

model.eval()
with torch.no_grad():
    out = model(x_te)
    preds = (out > 0).float()
    test_acc = (preds == y_te).float().mean().item()
    true_acc = ((out > 0.5).float() == y_te).float().mean().item()
print(f"fraud rate test {y_te.mean():.3f}")
print(f"HELDOUT test_acc {test_acc:.4f}")
print(f"HELDOUT true_acc {true_acc:.4f}")
