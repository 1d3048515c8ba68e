"""Bug: a MultiStepLR stepped with the validation accuracy, `scheduler.step(val_acc)` (left over
from a ReduceLROnPlateau): its step takes the value as the epoch, and an accuracy below 1 is
always before the first milestone, so the rate never decays (0.2 to the end where it should end
at 0.002). Held out: accuracy 0.873, negative log-likelihood 0.441; with `scheduler.step()`,
0.926 and 0.246."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 4))


def make(n: int, flip: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 10)
    with torch.no_grad():
        y = teacher(x).argmax(1)
    noisy = torch.rand(n) < flip
    y[noisy] = torch.randint(0, 4, (int(noisy.sum()),))
    return x, y


x, y = make(2000, 0.1)
x_val, y_val = make(500, 0.1)
x_test, y_test = make(3000, 0.0)
model = nn.Sequential(
    nn.Linear(10, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4)
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[10, 15], gamma=0.1)


def accuracy(inputs: torch.Tensor, labels: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return (model(inputs).argmax(1) == labels).float().mean().item()


for _epoch in range(20):
    model.train()
    order = torch.randperm(len(x))
    for i in range(0, len(x), 32):
        batch = order[i : i + 32]
        loss = F.cross_entropy(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    val_acc = accuracy(x_val, y_val)
    scheduler.step(val_acc)  # bug: scheduler.step()

with torch.no_grad():
    nll = F.cross_entropy(model(x_test), y_test).item()
print(f"HELDOUT test_acc {accuracy(x_test, y_test):.4f} test_nll {nll:.4f}")
print(f"final lr {optimizer.param_groups[0]['lr']:.3g}")
