"""Clean: gradients taken with torch.autograd.grad and set on .grad by hand, as the bug that
adds them up without clearing looks: accumulated over 4 micro-batches by hand (a new tensor,
then in place) and cleared once a step; then a fresh p.grad = g each step, never cleared,
which finds last step's gradient there and replaces it. (The accumulation comes first: steps
that get 4x heavier later would read as a step-time regression.)"""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)


def gradients() -> tuple[torch.Tensor, ...]:
    x = torch.randn(32, 20)
    return torch.autograd.grad(F.cross_entropy(model(x), x[:, :5].argmax(1)), params)


for i in range(240):  # 60 steps, 4 micro-batches each
    for p, g in zip(params, gradients(), strict=True):
        if i % 8 < 4:
            p.grad = g / 4 if p.grad is None else p.grad + g / 4
        elif p.grad is None:
            p.grad = g / 4
        else:
            p.grad += g / 4
    if i % 4 == 3:
        opt.step()
        opt.zero_grad(set_to_none=i % 8 < 4)
for _step in range(60):
    for p, g in zip(params, gradients(), strict=True):
        p.grad = g
    opt.step()
print("done")
