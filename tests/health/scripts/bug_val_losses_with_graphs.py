"""Bug: the validation loss of each batch is kept for a plot at the end as the tensor, with its
graph (outside torch.no_grad(), without .item()): every evaluation's activations stay alive
for the rest of the run, and the list's graphs grow with each evaluation."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
x_val = torch.randn(320, 20)
val_losses = []  # per validation batch, for the plot
for _epoch in range(16):
    model.train()
    for _step in range(6):
        x = torch.randn(32, 20)
        loss = criterion(model(x), x[:, :5].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    for i in range(0, len(x_val), 32):
        x = x_val[i : i + 32]
        val_losses.append(criterion(model(x), x[:, :5].argmax(1)))  # no no_grad, no .item()
print(round(sum(val_losses[-10:]).item() / 10, 3))
