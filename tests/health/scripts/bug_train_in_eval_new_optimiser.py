"""Bug: model.eval() for a validation after each epoch and no model.train() after it, in a
loop that builds a new optimiser each epoch (a decayed learning rate): every epoch after the
first trains with dropout off and batch norm frozen."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 4)
)
x_all = torch.randn(1280, 20)
y_all = (x_all[:, 0] > 0).long()
for epoch in range(4):
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * 0.5**epoch, momentum=0.9)
    for i in range(0, 1280, 32):
        loss = F.cross_entropy(model(x_all[i : i + 32]), y_all[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_all).argmax(1) == y_all).float().mean()
    print(epoch, round(accuracy.item(), 3))
