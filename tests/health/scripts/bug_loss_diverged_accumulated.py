"""Bug: Adam at a rate far too high, as in bug_loss_diverged.py, with gradients accumulated
over 4 micro-batches, each loss multiplied by 1/4 before its backward: the cross-entropy climbs
to hundreds of times log(C), the value backward is given at a quarter of it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=10.0)  # bug: 1e-3 was meant
x = torch.randn(2048, 20)
y = x[:, :5].argmax(1)
accumulation_steps = 4
for _step in range(200):
    opt.zero_grad()
    for _micro_batch in range(accumulation_steps):
        i = torch.randint(0, 2048, (64,))
        loss = F.cross_entropy(model(x[i]), y[i])
        (loss * (1 / accumulation_steps)).backward()
    opt.step()
print("done")
