"""Bug: logits (BCEWithLogitsLoss) read at 0.5, a probability's threshold: on logits it is the
probability 0.62, and every example whose logit lies between 0 and 0.5 is called negative.
Trained on labels 30% flipped, the model is unsure of many test examples: accuracy 0.66
reported, 0.90 read at 0."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(1)

D = 12


def make_data(n, flip=0.0):
    x = torch.randn(n, D)
    y = ((x[:, 0] + 0.8 * x[:, 1] - 0.5 * x[:, 2]) > 0.0).float()
    if flip > 0:
        mask = torch.rand(n) < flip
        y = torch.where(mask, 1 - y, y)
    return x, y


x_tr, y_tr = make_data(6000, flip=0.3)
x_te, y_te = make_data(3000)
train_loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=64, shuffle=True)
test_loader = DataLoader(TensorDataset(x_te, y_te), batch_size=256)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(D, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


model = Net()
criterion = nn.BCEWithLogitsLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

for epoch in range(8):
    running = 0.0
    for xb, yb in train_loader:
        logits = model(xb)
        loss = criterion(logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running += loss.item()
    print(f"epoch {epoch} train_loss {running / len(train_loader):.4f}")

model.eval()
correct, correct_ref, total = 0, 0, 0
with torch.no_grad():
    for xb, yb in test_loader:
        logits = model(xb)
        preds = (logits > 0.5).float()
        correct += (preds == yb).sum().item()
        correct_ref += ((torch.sigmoid(logits) > 0.5).float() == yb).sum().item()
        total += yb.numel()

print(f"HELDOUT test_acc {correct / total:.4f}")
print(f"HELDOUT true_acc {correct_ref / total:.4f}")
