"""Bug: feature standardisation divides by a std that is zero for a constant column."""

import torch
from torch import nn

torch.manual_seed(0)


class Standardize(nn.Module):
    def forward(self, x):
        return (x - x.mean(0)) / x.std(0)  # bug: no eps; column 3 is constant


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = Standardize()
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        return self.mlp(self.norm(x))


model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _step in range(10):
    x = torch.randn(32, 8)
    x[:, 3] = 1.0
    loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())
