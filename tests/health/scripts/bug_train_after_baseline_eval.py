"""Bug: a baseline evaluation before training puts the model in eval mode, and the loop never
calls model.train(): every step trains with dropout off and batch norm frozen at its
initial running statistics."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 5)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x_val = torch.randn(256, 20)


def evaluate() -> float:
    model.eval()
    with torch.no_grad():
        return (model(x_val).argmax(1) == x_val[:, :5].argmax(1)).float().mean().item()


print("before training", round(evaluate(), 3))
for _step in range(100):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("after training", round(evaluate(), 3))
