"""Subnormal floats are flushed to zero while ``fit`` trains on the CPU (weights that get no
gradient shrink into them under weight decay, and the CPU computes with them many times
slower), and the flag is put back as it was when ``fit`` returns."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.models.common import Output
from treeqa.train.loop import Callback, TrainConfig, TrainState, fit


def flushing() -> bool:
    return (torch.tensor(1e-39) * 1.0).item() == 0.0  # below float32's smallest normal


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, batch: torch.Tensor) -> Output:  # [B, 5]: features, label
        logits = self.linear(batch[:, :4])
        return Output(logits, F.cross_entropy(logits, batch[:, 4].long()))


class Flag(Callback):
    def __init__(self) -> None:
        self.seen: list[bool] = []

    def on_epoch_start(self, state: TrainState) -> None:
        self.seen.append(flushing())


def test_fit_flushes_subnormals_on_the_cpu_and_puts_the_flag_back() -> None:
    torch.manual_seed(0)
    data = [torch.cat([torch.randn(8, 4), torch.randint(0, 2, (8, 1)).float()], 1)]
    model = Tiny()
    flag = Flag()
    config = TrainConfig(epochs=2, device="cpu", health="off", optim="adam")
    assert not flushing()
    fit(model, torch.optim.Adam(model.parameters()), lambda epoch: data, config, callbacks=[flag])
    assert flag.seen == [True, True]
    assert not flushing()
