"""Clean: a full-batch fit by L-BFGS, whose ``step(closure)`` evaluates the closure several
times as it moves the weights (up to ``max_iter``) and returns the first evaluation: the step's
loss, which it prints. The last evaluation, read before, is the next step's loss."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.linspace(-3, 3, 256)[:, None]  # [N, 1]
y = torch.sin(2 * x) + 0.1 * torch.randn_like(x)
model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
# A short history: with the default 100 pairs, 4 a step, its two-loop recursion grows for 25
# steps, a quarter of this run (3.5 -> 5.6 ms, read as a step-time regression once in 2 runs).
opt = torch.optim.LBFGS(
    model.parameters(), lr=0.5, max_iter=4, history_size=10, line_search_fn="strong_wolfe"
)


def closure():
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss


losses = [opt.step(closure).item() for _ in range(100)]
print("losses", " ".join(f"{v:.6f}" for v in losses))
