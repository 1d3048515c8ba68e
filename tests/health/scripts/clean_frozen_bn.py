"""Clean: fine-tuning with frozen batch norm (its layers in eval mode and requires_grad=False,
still given to the optimiser; the model itself in train mode), an evaluation after each
epoch followed by model.train(), the last epoch in eval mode on purpose, and a OneCycle
schedule stepped every batch."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 5)
)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scheduler = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=120)


def freeze_bn(module: nn.Module) -> None:
    if isinstance(module, nn.BatchNorm1d):
        module.eval()
        module.requires_grad_(False)


x_val = torch.randn(256, 20)
for epoch in range(3):
    model.train(epoch < 2)  # the last epoch in eval mode on purpose: dropout off too
    model.apply(freeze_bn)
    for _step in range(40):
        x = torch.randn(32, 20)
        loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        scheduler.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_val).argmax(1) == x_val[:, :5].argmax(1)).float().mean()
    print(epoch, round(accuracy.item(), 3))
