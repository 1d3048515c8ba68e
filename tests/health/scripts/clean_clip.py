"""Clean: clips in the right places that look like the clip bugs. Gradient accumulation over
4 micro-batches clipped once (by value, imported by name) after the last; backward at the end
of an iteration with the clip and step at the top of the next; a clip given a list of
parameters that is used again at every step; and a clip with an infinite limit after the
step, which clips nothing and only reads the gradient norm to log it. (The accumulation comes
first: steps that get 4x heavier later would read as a step-time regression.)"""

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import clip_grad_value_

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)


def batch_loss() -> torch.Tensor:
    x = torch.randn(32, 20)
    return F.cross_entropy(model(x), x[:, :5].argmax(1))


for i in range(320):  # 80 steps, 4 micro-batches each
    (batch_loss() / 4).backward()
    if i % 4 == 3:
        clip_grad_value_(params, clip_value=0.5)
        opt.step()
        opt.zero_grad()
batch_loss().backward()
for _step in range(80):  # step, then the next backward
    torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
    opt.step()
    opt.zero_grad()
    batch_loss().backward()
for _step in range(80):  # no clipping, the gradient norm read after each step to log it
    opt.zero_grad()
    batch_loss().backward()
    opt.step()
    norm = torch.nn.utils.clip_grad_norm_(params, float("inf"))
print("done")
