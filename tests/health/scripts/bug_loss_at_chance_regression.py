"""Bug: a regression whose targets were shuffled apart from their inputs (the table's rows
sorted by one column, the targets by another, then zipped). Three outputs on their own scales,
standardised; the MSE settles at the targets' variance about their mean, ~1.0, the error of
predicting the mean: the model learns nothing from its inputs. A model given the right rows
reaches ~0.01 (``clean_multi_output_regression.py``)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
n, features = 4096, 10
x = torch.randn(n, features)
w = torch.randn(features, 3)
y = torch.tanh(x @ w) * torch.tensor([1.0, 20.0, 300.0]) + 0.05 * torch.randn(n, 3)
y = y[torch.argsort(y[:, 0])]  # bug: sorted on their own, apart from their inputs' rows
y = (y - y.mean(0)) / y.std(0)
print("target variances", [round(v, 3) for v in y.var(0).tolist()])

model = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.MSELoss()
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
step = 0
for _epoch in range(6):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")
        step += 1
