"""Bug: a run resumed mid-way from its checkpoint into a new model, while the optimiser built
over the old one steps on: the new model's gradients are applied by nothing, and the old
model, which the optimiser holds, runs no more."""

import io

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2048, 16)
y = (x[:, 0] + x[:, 1] > 0).long()


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))


model = make_model()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(120):
    if step == 60:  # resume from the checkpoint just written
        saved = io.BytesIO()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, saved)
        saved.seek(0)
        state = torch.load(saved)
        model = make_model()
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])  # bug: opt = SGD(model.parameters(), ...) first
    pick = torch.randint(0, 2048, (64,))
    loss = F.cross_entropy(model(x[pick]), y[pick])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
