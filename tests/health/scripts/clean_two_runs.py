"""Clean: a training loop in a function called twice (two seeds), each run with its own model
and optimiser; doctor counts the steps of both."""

import torch
from torch import nn


def train(seed: int) -> float:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _step in range(60):
        x = torch.randn(32, 16)
        loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


print(train(0), train(1))
