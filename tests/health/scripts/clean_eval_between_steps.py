"""Clean: a baseline evaluation before training and one every 40 steps, in eval mode under
no_grad / inference_mode, with a summed loss; training logs loss.item() and keeps detached
losses. The evaluation is between steps: neither a step's compute nor its data wait."""

import time

import torch
from torch import nn

EVAL_SLEEP = 0.15  # s per evaluation forward: stands for a large validation set


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 5))

    def forward(self, x):
        if not self.training:
            time.sleep(EVAL_SLEEP)
        return self.body(x)


torch.manual_seed(0)
x_val = torch.randn(256, 32)
y_val = x_val[:, :5].argmax(1)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss(reduction="sum")


def evaluate(step: int) -> float:
    model.eval()
    with torch.no_grad() if step % 80 else torch.inference_mode():
        total = sum(
            criterion(model(x_val[i : i + 128]), y_val[i : i + 128]).item() for i in (0, 128)
        )
    model.train()
    return total / len(x_val)


print("before training", evaluate(0))
running, kept = 0.0, []
for step in range(1, 101):
    x = torch.randn(32, 32)
    loss = criterion(model(x), x[:, :5].argmax(1)) / len(x)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    running += loss.item()
    kept.append(loss.detach())
    if step % 40 == 0:
        print(step, running / 40, evaluate(step))
        running = 0.0
print(torch.stack(kept).mean().item())
