"""``bidirectional-last-step``: a bidirectional RNN's sequence output summarised by its last time
step, ``out[:, -1, :]`` (``out[-1]`` time first, or the last padded position after
``pad_packed_sequence``). There the forward direction has read the whole sequence, but the
backward direction has read only the last token: half the summary is nearly empty, and what the
sequence says early reaches the head only through the forward direction's long way round. The
summary of both directions is ``torch.cat([h_n[-2], h_n[-1]], dim=1)`` (or ``out[:, -1, :H]``
with ``out[:, 0, H:]``), or a pooling over every step.

On sampled training steps the output of each bidirectional ``nn.RNN``/``nn.LSTM``/``nn.GRU``
(its padded tensor, or a ``PackedSequence``'s data) gets a gradient hook, which marks the time
steps whose backward half (the last ``hidden_size`` features) received a gradient, on the
device. At the step's end (one host read a layer) a layer of ``SHORTEST`` time steps or more
whose backward half got a gradient at its last time step and nowhere else counts; ``STEPS``
sampled steps in a row make the finding, at the layer. A readout that takes the backward half
at step 0, pools over the steps, tags every step, or reads ``h_n`` alone (no gradient reaches
the output) is not this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from treeqa.health.findings import Finding

SHORTEST = 4
"""Time steps a sequence needs for its last to be a poor summary of it."""
STEPS = 2
"""Sampled steps in a row whose backward half was read at the last step alone."""


class RnnReadouts:
    """``note`` is given each module's forward on a sampled step; ``judge`` at its end."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        # layer -> the time steps whose backward half got a gradient this step
        self.read: dict[str, torch.Tensor] = {}
        self.steps: dict[str, int] = {}  # layer -> sampled steps in a row read at the last alone
        self.reported: set[str] = set()

    def note(self, name: str, module: nn.Module, output: Any) -> None:
        """``module`` (named ``name``) ran a forward giving ``output`` in a sampled step."""
        if not isinstance(module, nn.RNNBase) or not module.bidirectional:
            return
        layer = f"{name} ({type(module).__name__})"
        out = output[0] if isinstance(output, tuple) and output else None
        if layer in self.reported:
            return
        if isinstance(out, PackedSequence):
            times = torch.repeat_interleave(torch.arange(len(out.batch_sizes)), out.batch_sizes).to(
                out.data.device
            )  # [rows]: each packed row's time step
            tensor = out.data
        elif isinstance(out, torch.Tensor) and out.dim() == 3:
            times = torch.arange(out.shape[1 if module.batch_first else 0], device=out.device)
            tensor = out
        else:
            return
        if not tensor.requires_grad or tensor.shape[-1] != 2 * module.hidden_size:
            return
        hidden, batch_first = module.hidden_size, module.batch_first and out is tensor

        def backward_half(grad: torch.Tensor) -> None:
            """The time steps whose backward half received a gradient (on the device)."""
            g = grad.detach()[..., hidden:] != 0  # [B, T, H] / [T, B, H] / [rows, H]
            if g.dim() == 3:
                used = g.any(dim=2).any(dim=0 if batch_first else 1)  # [T]
            else:
                used = torch.zeros(int(times.max()) + 1, dtype=torch.bool, device=g.device)
                used.index_fill_(0, times[g.any(dim=1)], True)
            self.read[layer] = used

        tensor.register_hook(backward_half)

    def judge(self) -> None:
        """At the sampled step's end."""
        read, self.read = self.read, {}
        for layer in set(self.steps) - set(read):
            self.steps[layer] = 0
        for layer, used in read.items():
            steps = len(used)
            last_only = steps >= SHORTEST and used.tolist() == [False] * (steps - 1) + [True]
            self.steps[layer] = self.steps.get(layer, 0) + 1 if last_only else 0
            if self.steps[layer] == STEPS and layer not in self.reported:
                self.reported.add(layer)
                self.add(bidirectional_last_step(layer, steps, STEPS))


def bidirectional_last_step(layer: str, steps: int, sampled: int) -> Finding:
    """``layer``'s backward direction was read at the last of ``steps`` time steps alone on
    ``sampled`` sampled steps in a row."""
    return Finding(
        "bidirectional-last-step",
        "warning",
        f"{layer} is bidirectional, and its output was read at the last time step alone "
        f"(out[:, -1]) on {sampled} sampled steps in a row: its backward direction there has "
        f"read only the last of {steps} steps, so half the summary is nearly empty, and what "
        "comes early reaches the head only through the forward direction",
        where=layer,
        evidence={"time_steps": steps, "steps": sampled},
    )
