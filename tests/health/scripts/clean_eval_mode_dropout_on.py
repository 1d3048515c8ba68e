"""Clean: fine-tuning whose first 60 steps train the whole model, after which batch norm is
frozen at its running statistics by model.eval(), the dropout layers put back in train mode:
the model is in eval mode from then on, on purpose, layer by layer."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 5)
)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(160):
    if step == 60:
        model.eval()
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.train()
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 1))
