"""Bug: fine-tuning a head on a frozen backbone (``requires_grad_(False)``, put in eval mode
once), while each epoch's ``model.train()`` puts the backbone back in train mode: its batch
norm moves the running statistics its frozen weights were trained with on every batch."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU())
head = nn.Linear(64, 3)
model = nn.Sequential(backbone, head)
backbone.requires_grad_(False).eval()  # frozen (as if loaded pretrained)
opt = torch.optim.Adam(head.parameters(), lr=1e-3)
x = torch.randn(1600, 16) + 1.0  # the new task's data: other statistics than pretraining's
y = (x[:, 0] > 1).long() + (x[:, 1] > 1).long()
for _epoch in range(4):
    model.train()  # bug: and then backbone.eval() again
    for i in torch.randperm(1600).split(64):
        loss = F.cross_entropy(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
print(round(loss.item(), 3))
