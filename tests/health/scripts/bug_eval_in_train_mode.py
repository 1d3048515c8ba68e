"""Bug: each epoch ends with a validation under no_grad, but the model is never put in eval
mode: dropout is on and batch norm normalises with each validation batch's statistics (and
updates its running ones from the validation data)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 5)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
valid = [torch.randn(64, 20) for _ in range(10)]
for _epoch in range(3):
    for _step in range(40):
        x = torch.randn(32, 20)
        loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():  # model.eval() forgotten
        correct = sum(int((model(x).argmax(1) == x[:, :5].argmax(1)).sum()) for x in valid)
    print(f"valid accuracy {correct / 640:.3f}")
