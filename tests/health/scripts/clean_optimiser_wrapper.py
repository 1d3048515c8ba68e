"""Clean: optimisers over the same parameters that are no new optimiser each step: a
Lookahead wrapper whose step runs its inner Adam's (two optimisers stepping the same
parameters, one backward), then plain SGD made anew each step, which keeps no state between
steps, and a new Adam once an epoch (its moments restart once per 40 steps, on purpose)."""

import torch
from torch import nn
from torch.nn import functional as F


class Lookahead(torch.optim.Optimizer):
    """Every k steps, move slow weights a fraction alpha toward the fast ones and reset."""

    def __init__(self, inner: torch.optim.Optimizer, k: int = 5, alpha: float = 0.5):
        self.inner, self.k, self.alpha, self.count = inner, k, alpha, 0
        super().__init__([p for g in inner.param_groups for p in g["params"]], {})
        self.slow = [p.detach().clone() for p in self.param_groups[0]["params"]]

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201
        self.inner.step()
        self.count += 1
        if self.count % self.k == 0:
            for slow, fast in zip(self.slow, self.param_groups[0]["params"], strict=True):
                slow.add_(fast - slow, alpha=self.alpha)
                fast.copy_(slow)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))


def train_step(opt: torch.optim.Optimizer) -> float:
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


lookahead = Lookahead(torch.optim.Adam(model.parameters(), lr=1e-3))
for _step in range(60):
    train_step(lookahead)
for _step in range(40):
    train_step(torch.optim.SGD(model.parameters(), lr=0.01))  # no state to lose
for _epoch in range(2):
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _step in range(40):
        loss = train_step(adam)
print("done", round(loss, 3))
