"""Bug: stochastic weight averaging of a network with batch norm, evaluated without
swa_utils.update_bn: the average's batch norms keep the running statistics copied when the
AveragedModel was made, before training, which belong to other weights than the average's."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import SWALR, AveragedModel

torch.manual_seed(0)
x = torch.randn(1024, 8)
y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).long()
model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
swa_model = AveragedModel(model)
swa_scheduler = SWALR(opt, swa_lr=0.05)
for epoch in range(8):
    for i in range(0, 1024, 64):
        loss = F.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
        opt.zero_grad()
        loss.backward()
        opt.step()
    if epoch >= 4:
        swa_model.update_parameters(model)
        swa_scheduler.step()
# bug: torch.optim.swa_utils.update_bn(loader, swa_model) belongs here
swa_model.eval()
with torch.no_grad():
    accuracy = (swa_model(x).argmax(1) == y).float().mean()
print(f"loss {loss.item():.3f}, averaged model's accuracy {accuracy:.3f}")
