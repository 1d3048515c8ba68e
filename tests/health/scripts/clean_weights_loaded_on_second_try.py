"""Clean: a loader that tries a checkpoint's keys as they are with ``strict=False`` and, when
nothing matched (the checkpoint was saved through ``nn.DataParallel``), loads them again with
the ``module.`` prefix stripped; and a fine-tuning that loads a backbone's weights with
``strict=False`` into a model with a new head (some keys match, the head's are missing)."""

import os
import tempfile

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2000, 20)
y = (x[:, :4] + 0.3 * torch.randn(2000, 4)).argmax(1)


def net(classes: int = 4) -> nn.Module:
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, classes))


def train(model: nn.Module, steps: int, classes: int = 4) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        i = torch.randint(0, 2000, (64,))
        loss = F.cross_entropy(model(x[i]), y[i] % classes)
        opt.zero_grad()
        loss.backward()
        opt.step()


def load(model: nn.Module, state: dict) -> None:
    missing, _ = model.load_state_dict(state, strict=False)
    if missing:  # saved through DataParallel: try again without its prefix
        model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})


pretrained = nn.DataParallel(net())
train(pretrained, 60)
path = os.path.join(tempfile.mkdtemp(), "pretrained.pt")
torch.save(pretrained.state_dict(), path)

model = net()
load(model, torch.load(path))
train(model, 60)

body = {k.removeprefix("module."): v for k, v in torch.load(path).items() if ".2." not in k}
finetuned = net(classes=3)
finetuned.load_state_dict(body, strict=False)  # the body; the head is new
train(finetuned, 60, classes=3)
os.remove(path)
print("done")
