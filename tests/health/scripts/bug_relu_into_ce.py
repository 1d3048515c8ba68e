"""Bug: a classifier whose last layer is followed by ReLU, its output given to
CrossEntropyLoss: no logit can go below 0, a wrong class's logit pushed down stops at 0 with
no gradient, and the classes are told apart only by how far the right one rises."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5), nn.ReLU())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for _step in range(100):
    x = torch.randn(32, 20)
    loss = criterion(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
