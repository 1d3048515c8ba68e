"""Bug: the model ends in Sigmoid and its output goes into BCEWithLogitsLoss, which applies a
sigmoid of its own: the loss cannot fall below ~0.31 and the gradients shrink."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1), nn.Sigmoid())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.BCEWithLogitsLoss()
for _step in range(100):
    x = torch.randn(32, 20)
    loss = criterion(model(x).squeeze(1), (x[:, 0] > 0).float())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
