"""Bug: a binary classifier trained with BCEWithLogitsLoss (its output is raw logits) scored
with torch.round(out), as if the output were a probability: a logit of 2.3 rounds to 2, no
class, so almost no prediction equals its label; test accuracy 0.04 where the sign of the
logit scores 0.94."""

import torch
import torch.nn as nn

torch.manual_seed(0)

N_TRAIN, N_TEST, D = 4000, 2000, 16


def make_data(n):
    x = torch.randn(n, D)
    w = torch.linspace(-1.0, 1.0, D)
    score = x @ w + 0.5 * torch.sin(3 * x[:, 0]) + 0.3 * torch.randn(n)
    y = (score > 0.4).float().unsqueeze(1)  # [n, 1]
    return x, y


x_train, y_train = make_data(N_TRAIN)
x_test, y_test = make_data(N_TEST)

model = nn.Sequential(
    nn.Linear(D, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, 1),
)
criterion = nn.BCEWithLogitsLoss()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)

for epoch in range(12):
    perm = torch.randperm(N_TRAIN)
    total = 0.0
    for i in range(0, N_TRAIN, 128):
        idx = perm[i : i + 128]
        out = model(x_train[idx])
        loss = criterion(out, y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item() * len(idx)
    if epoch % 10 == 0:
        print(f"epoch {epoch} loss {total / N_TRAIN:.4f}")

model.eval()
with torch.no_grad():
    out = model(x_test).squeeze(1)
    preds = torch.round(out)
    test_acc = (preds == y_test.squeeze(1)).float().mean().item()
    true_acc = ((out > 0).float() == y_test.squeeze(1)).float().mean().item()

print(f"HELDOUT test_acc {test_acc:.4f}")
print(f"HELDOUT true_acc {true_acc:.4f}")
