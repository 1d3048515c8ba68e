"""Bug: ReduceLROnPlateau(mode="max") given the validation loss. Each falling loss is no
improvement to a scheduler waiting for a rising metric, so it cuts the learning rate by 10x
every other epoch while the model gets better, down to 1e-8: training stalls far from done."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1200, 10)
y = (x[:, :3] ** 2).sum(1, keepdim=True) - x[:, 3:4] + 0.1 * torch.randn(1200, 1)
model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", factor=0.1, patience=1)
for epoch in range(12):
    for i in range(0, 1000, 100):
        loss = F.mse_loss(model(x[i : i + 100]), y[i : i + 100])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        val_loss = F.mse_loss(model(x[1000:]), y[1000:]).item()
    scheduler.step(val_loss)  # bug: mode="min" for a loss
    print(f"epoch {epoch} val {val_loss:.3f} lr {opt.param_groups[0]['lr']:.1e}")
