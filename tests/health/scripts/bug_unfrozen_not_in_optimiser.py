"""Bug: gradual unfreezing with an optimiser built over the parameters trainable at the start
(the head): the layers unfrozen later get gradients at every step, but no optimiser holds them,
so they never change."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
body = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 32)])
model = nn.Sequential(body[0], nn.ReLU(), body[1], nn.ReLU(), nn.Linear(32, 3))
body.requires_grad_(False)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-3)
x = torch.randn(2048, 16)
y = x[:, :3].argmax(1)
for epoch in range(3):
    if epoch > 0:
        body[2 - epoch].requires_grad_(True)  # bug: not added with opt.add_param_group
    for _ in range(50):
        i = torch.randint(0, 2048, (32,))
        loss = F.cross_entropy(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
print("done")
