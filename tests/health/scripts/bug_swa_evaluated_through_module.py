"""Bug: stochastic weight averaging of a network with batch norm, without swa_utils.update_bn,
the average evaluated through its ``.module`` by a function that takes any model: its batch norms
hold the statistics update_parameters copied from the trained model, which belong to other
weights than the average's."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import AveragedModel

torch.manual_seed(0)
x = torch.randn(1024, 8)
y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).long()


def accuracy(model: nn.Module) -> float:
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
swa_model = AveragedModel(model)
for epoch in range(8):
    model.train()
    for i in range(0, 1024, 64):
        loss = F.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
        opt.zero_grad()
        loss.backward()
        opt.step()
    if epoch >= 4:
        swa_model.update_parameters(model)
# bug: torch.optim.swa_utils.update_bn(loader, swa_model) belongs here
print(f"model {accuracy(model):.3f}, average {accuracy(swa_model.module):.3f}")
