"""Clean: weights that start with equal rows on purpose, each parted by its first steps or
never trained: a zero-initialised classifier; residual blocks whose last layer starts at 0
(ReZero, GPT-2's scaled projections); LoRA's B at 0 beside a random A over a frozen base; a
hidden layer at one value before a random layer (the next layer's columns part its units); a
model at one value throughout but with dropout after each hidden layer; a frozen averaging
layer at 1/4. All five train on every step."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1024, 12)
y = (x[:, 0] * x[:, 1] > 0).long() + (x[:, 2] > 0).long()


class Residual(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        nn.init.zeros_(self.down.weight)  # the branch starts as the identity
        nn.init.zeros_(self.down.bias)

    def forward(self, h):
        return h + self.down(F.gelu(self.up(h)))


class LoRA(nn.Module):
    def __init__(self, base, rank=4):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(rank, base.in_features) / base.in_features**0.5)
        self.b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, h):
        return self.base(h) + h @ self.a.T @ self.b.T


def zero_head():
    head = nn.Linear(32, 3)
    nn.init.zeros_(head.weight)
    return nn.Sequential(nn.Linear(12, 32), nn.Tanh(), head)


def constant_before_random():
    first = nn.Linear(12, 32)
    nn.init.constant_(first.weight, 0.1)
    return nn.Sequential(first, nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3))


def constant_with_dropout():
    model = nn.Sequential(
        nn.Linear(12, 32),
        nn.Tanh(),
        nn.Dropout(0.2),
        nn.Linear(32, 32),
        nn.Tanh(),
        nn.Dropout(0.2),
        nn.Linear(32, 3),
    )
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.constant_(layer.weight, 0.1)
    return model


def averaged():
    average = nn.Linear(12, 4, bias=False)
    nn.init.constant_(average.weight, 0.25)
    average.requires_grad_(False)
    return nn.Sequential(nn.Linear(12, 12), nn.Tanh(), average, nn.Linear(4, 3))


models = {
    "zero head": zero_head(),
    "zero residual branches": nn.Sequential(
        nn.Linear(12, 32), Residual(32), Residual(32), nn.Linear(32, 3)
    ),
    "LoRA": nn.Sequential(LoRA(nn.Linear(12, 32)), nn.Tanh(), LoRA(nn.Linear(32, 3))),
    "constant before random": constant_before_random(),
    "constant with dropout": constant_with_dropout(),
    "frozen average": averaged(),
}
optimizer = torch.optim.Adam([p for m in models.values() for p in m.parameters()], lr=1e-2)
for step in range(150):
    batch = torch.randint(0, len(x), (64,))
    losses = {name: F.cross_entropy(m(x[batch]), y[batch]) for name, m in models.items()}
    optimizer.zero_grad()
    sum(losses.values()).backward()
    optimizer.step()
    if step % 50 == 0:
        print(step, {name: round(loss.item(), 3) for name, loss in losses.items()})
