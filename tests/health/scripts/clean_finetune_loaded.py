"""Clean: a model trained elsewhere, saved, loaded with load_state_dict and fine-tuned on
other labels: its first loss is far above log(C), as a new task's is, not an
initialisation's."""

import io

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5))


x = torch.randn(1000, 10)
y = x[:, :5].argmax(1)
pre = net()  # stands for a checkpoint trained elsewhere: confident, on its own labels
with torch.no_grad():
    pre[2].weight.mul_(20)
    pre[2].bias.copy_(torch.tensor([12.0, 0, 0, 0, 0]))
saved = io.BytesIO()
torch.save(pre.state_dict(), saved)
saved.seek(0)

model = net()
model.load_state_dict(torch.load(saved))
remapped = (y + 2) % 5  # the new task's labels
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for i in range(0, 900, 10):
    loss = F.cross_entropy(model(x[i : i + 10]), remapped[i : i + 10])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
