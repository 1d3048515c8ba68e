"""Bug: a train/validation split that indexes the inputs with its permutation and the targets
without it (``y[:3200]``), so every row keeps the same wrong target all 8 epochs. The network
memorises a little of those pairs: its MSE reads 0.96 of the error of predicting the targets'
mean in the second half's median, and validation stays at ~1.06 (the targets' variance is 1).
Found with the band 5% under that level a mean squared error is given."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
N, D = 4000, 12
X = torch.randn(N, D)
w_true = torch.randn(D)
y = X @ w_true + 0.8 * torch.sin(2 * X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.2 * torch.randn(N)

perm = torch.randperm(N)
train_idx, val_idx = perm[:3200], perm[3200:]
X_train, y_train = X[train_idx], y[:3200]  # bug: y[train_idx]
X_val, y_val = X[val_idx], y[3200:]
x_mean, x_std = X_train.mean(0), X_train.std(0)
y_mean, y_std = y_train.mean(), y_train.std()
X_train, X_val = (X_train - x_mean) / x_std, (X_val - x_mean) / x_std
y_train, y_val = (y_train - y_mean) / y_std, (y_val - y_mean) / y_std

train = DataLoader(TensorDataset(X_train, y_train[:, None]), batch_size=64, shuffle=True)
val = DataLoader(TensorDataset(X_val, y_val[:, None]), batch_size=256)
model = nn.Sequential(nn.Linear(D, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
criterion = nn.MSELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(8):
    model.train()
    for xb, yb in train:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        mse = sum(criterion(model(xb), yb).item() * len(xb) for xb, yb in val) / len(X_val)
    print(f"epoch {epoch} train {loss.item():.4f} val {mse:.4f}")
