"""Bug: a regression MLP that ends in ``nn.ReLU()`` (copied from its hidden layers) trained on
standardised targets, half of them below 0. No output can go below 0: the loss cannot fall
below the negative targets' mean square (0.517 here), and an output pushed below 0 gets no
gradient. After 300 steps the loss on all rows is 0.519, at that floor, where the same model
without the final ReLU reaches 0.005."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 8)
y = x @ torch.randn(8) + 0.5 * torch.sin(3 * x[:, 0])
y = (y - y.mean()) / y.std()  # standardised: mean 0, half below it

model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1), nn.ReLU())
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

for step in range(300):
    batch = torch.randint(0, len(x), (64,))
    loss = F.mse_loss(model(x[batch]).squeeze(1), y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step}: loss {loss.item():.3f}")
with torch.no_grad():
    print(f"loss on all rows {F.mse_loss(model(x).squeeze(1), y).item():.3f}")
