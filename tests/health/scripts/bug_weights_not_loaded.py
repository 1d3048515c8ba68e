"""Bug: a checkpoint saved from a model wrapped in ``nn.DataParallel`` (its keys prefixed
``module.``) loaded into the bare model with ``strict=False``, to get past the error
``strict=True`` gave. None of the keys is one of the model's names, so torch loads nothing and
says nothing: the fine-tuning starts from random weights."""

import os
import tempfile

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2000, 20)
y = (x[:, :4] + 0.3 * torch.randn(2000, 4)).argmax(1)


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))


pretrained = nn.DataParallel(net())  # as a multi-GPU run wraps it (on the CPU it runs as is)
opt = torch.optim.Adam(pretrained.parameters(), lr=3e-3)
for _ in range(60):
    i = torch.randint(0, 2000, (64,))
    loss = F.cross_entropy(pretrained(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
path = os.path.join(tempfile.mkdtemp(), "pretrained.pt")
torch.save(pretrained.state_dict(), path)  # keys: module.0.weight, ...

model = net()
model.load_state_dict(torch.load(path), strict=False)  # bug: the "module." prefix stays
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(60):
    i = torch.randint(0, 2000, (64,))
    loss = F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
os.remove(path)
print("done")
