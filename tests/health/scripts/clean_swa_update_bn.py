"""Clean: stochastic weight averaging of a network with batch norm, as PyTorch's recipe does it:
swa_utils.update_bn recomputes the average's batch-norm statistics before it is evaluated. An
exponential average made with use_buffers=True (its statistics averaged too) is evaluated
as it is."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import SWALR, AveragedModel, get_ema_multi_avg_fn, update_bn

torch.manual_seed(0)
x = torch.randn(1024, 8)
y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).long()
model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
swa_model = AveragedModel(model)
ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99), use_buffers=True)
swa_scheduler = SWALR(opt, swa_lr=0.05)
loader = [(x[i : i + 64], y[i : i + 64]) for i in range(0, 1024, 64)]
for epoch in range(8):
    for inputs, labels in loader:
        loss = F.cross_entropy(model(inputs), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema_model.update_parameters(model)
    if epoch >= 4:
        swa_model.update_parameters(model)
        swa_scheduler.step()
update_bn(((inputs,) for inputs, _ in loader), swa_model)
swa_model.eval()
ema_model.eval()
with torch.no_grad():
    for name, average in (("swa", swa_model), ("ema", ema_model)):
        print(f"{name} accuracy {(average(x).argmax(1) == y).float().mean():.3f}")
