"""Clean: ReduceLROnPlateau given the metric its mode waits for, each cutting the rate several
times: mode="max" on a validation accuracy, and a second run with mode="min" on the validation
loss of a model that soon stops improving."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1200, 10)
y = (x[:, :3].sum(1) > 0.3 * x[:, 3:].sum(1)).long()
noisy = torch.where(torch.rand(1200) < 0.15, 1 - y, y)  # a ceiling: the accuracy plateaus


def train(mode: str) -> None:
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, mode=mode, factor=0.3, patience=1, threshold=1e-2
    )
    for epoch in range(10):
        for i in range(0, 1000, 100):
            loss = F.cross_entropy(model(x[i : i + 100]), noisy[i : i + 100])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            logits = model(x[1000:])
            val_loss = F.cross_entropy(logits, noisy[1000:]).item()
            accuracy = (logits.argmax(1) == y[1000:]).float().mean().item()
        scheduler.step(accuracy if mode == "max" else val_loss)
        print(
            f"{mode} epoch {epoch} val {val_loss:.3f} acc {accuracy:.3f} lr {opt.param_groups[0]['lr']:.1e}"
        )


train("max")
train("min")
