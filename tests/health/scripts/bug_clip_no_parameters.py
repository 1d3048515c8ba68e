"""Bug: one generator of parameters for the optimiser and the clip: the optimiser reads it
up, and every clip is given an empty generator and clips nothing."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import clip_grad_norm_

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
params = model.parameters()
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
for _step in range(60):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    clip_grad_norm_(params, max_norm=1.0)
    opt.step()
print("done")
