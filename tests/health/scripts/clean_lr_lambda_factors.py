"""Clean: LambdaLRs whose lambdas return factors of the optimiser's rate (a warm-up then a
cosine decay over Adam(lr=1e-3)), or return the rate itself over an optimiser given lr=1.0
(the Transformer's schedule, as the Annotated Transformer writes it), and a warm-up longer
than a short run (its factor still rising at the end)."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
direction = torch.randn(20, 1)
x = torch.randn(3000, 20)
y = (x @ direction).squeeze(1).gt(0).long()


def warmup_cosine(step, warmup=20, total=120):
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * min(step - warmup, total) / total))


def transformer_rate(step, d_model=64, warmup=40):
    step += 1
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def train(lr, lr_lambda, steps):
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    for _ in range(steps):
        i = torch.randint(0, 2000, (64,))
        loss = F.cross_entropy(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        scheduler.step()
    with torch.no_grad():
        return (model(x[2000:]).argmax(1) == y[2000:]).float().mean().item()


print(f"warm-up and cosine {train(1e-3, warmup_cosine, 140):.2f}")
print(f"transformer rate {train(1.0, transformer_rate, 140):.2f}")
print(f"long warm-up {train(1e-3, lambda step: step / 10_000, 100):.2f}")
