"""Clean: an optimiser wrapper for sharpness-aware minimisation, as SAM's reference code
writes it: ``first_step`` moves the weights uphill in place (no optimiser steps), a second
forward and backward there, ``second_step`` puts them back and steps the inner SGD. Its loop
is a function called twice, each run with a model and wrapper of its own: 60 + 60 steps."""

import torch
from torch import nn
from torch.nn import functional as F


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, **kwargs):  # noqa: ANN001
        super().__init__(params, {"rho": rho, **kwargs})
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self) -> None:
        grads = [
            p.grad.norm() for g in self.param_groups for p in g["params"] if p.grad is not None
        ]
        scale = self.param_groups[0]["rho"] / (torch.norm(torch.stack(grads)) + 1e-12)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p]["old_p"] = p.data.clone()
                    p.add_(p.grad * scale)
        self.zero_grad()

    @torch.no_grad()
    def second_step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        self.zero_grad()


def train(seed: int) -> float:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
    opt = SAM(model.parameters(), torch.optim.SGD, lr=0.05, momentum=0.9)
    for _step in range(60):
        x = torch.randn(32, 20)
        y = x[:, :5].argmax(1)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.first_step()
        F.cross_entropy(model(x), y).backward()
        opt.second_step()
    return loss.item()


print(round(train(0), 3), round(train(1), 3))
