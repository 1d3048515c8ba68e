"""``bidirectional-last-step``: a bidirectional RNN's sequence output summarised by its last time
step, ``out[:, -1, :]`` (``out[-1]`` time first, the last padded position after
``pad_packed_sequence``, or each sequence's last real step: ``out[range(B), lengths - 1]``). There the forward direction has read the whole sequence, but the
backward direction has read only the last token: half the summary is nearly empty, and what the
sequence says early reaches the head only through the forward direction's long way round. The
summary of both directions is ``torch.cat([h_n[-2], h_n[-1]], dim=1)`` (or ``out[:, -1, :H]``
with ``out[:, 0, H:]``), or a pooling over every step.

On sampled training steps the output of each bidirectional ``nn.RNN``/``nn.LSTM``/``nn.GRU``
(its padded tensor, or a ``PackedSequence``'s data) gets a gradient hook, which reads whether
its backward half (the last ``hidden_size`` features) received a gradient, and whether anywhere
but at the last time step (a packed batch's: each sequence's own last), on the device. At the
step's end (one host read a layer) a layer of ``SHORTEST`` time steps or more whose backward
half got a gradient at the last step and nowhere else counts; ``STEPS``
sampled steps in a row make the finding, at the layer. A readout that takes the backward half
at step 0, pools over the steps, tags every step, or reads ``h_n`` alone (no gradient reaches
the output) is not this.
"""

from __future__ import annotations

import functools
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
        # layer -> (its time steps; on the device: whether its backward half got a gradient,
        # and whether anywhere but each sequence's last step)
        self.read: dict[str, tuple[int, torch.Tensor]] = {}
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
            tensor, steps = out.data, len(out.batch_sizes)
            last = _packed_last(out.batch_sizes).to(tensor.device)  # [rows]
        elif isinstance(out, torch.Tensor) and out.dim() == 3:
            tensor, steps = out, out.shape[1 if module.batch_first else 0]
            last = torch.arange(steps, device=out.device) == steps - 1  # [T]
            if module.batch_first:
                last = last[None, :]  # [1, T], against [B, T]
            else:
                last = last[:, None]  # [T, 1], against [T, B]
        else:
            return
        if not tensor.requires_grad or tensor.shape[-1] != 2 * module.hidden_size:
            return
        # (a function of the step's reads alone: a hook holding this object, and through it
        # the monitor and the models, from the script's graph kept its run alive after it)
        tensor.register_hook(
            functools.partial(_backward_half, self.read, layer, steps, last, module.hidden_size)
        )

    def judge(self) -> None:
        """At the sampled step's end (one host read a layer read)."""
        read = dict(self.read)
        self.read.clear()
        for layer in set(self.steps) - set(read):
            self.steps[layer] = 0
        for layer, (steps, flags) in read.items():
            used, elsewhere = flags.tolist()
            last_only = steps >= SHORTEST and used and not elsewhere
            self.steps[layer] = self.steps.get(layer, 0) + 1 if last_only else 0
            if self.steps[layer] == STEPS and layer not in self.reported:
                self.reported.add(layer)
                self.add(bidirectional_last_step(layer, steps, STEPS))


def _backward_half(
    read: dict[str, tuple[int, torch.Tensor]],
    layer: str,
    steps: int,
    last: torch.Tensor,
    hidden: int,
    grad: torch.Tensor,
) -> None:
    """A tensor hook: whether ``layer``'s backward half received a gradient, and anywhere but
    at the last step (of the batch, or a packed batch's of each sequence), on the device."""
    used = (grad.detach()[..., hidden:] != 0).any(dim=-1)  # [B, T] / [T, B] / [rows]
    read[layer] = (steps, torch.stack([used.any(), (used & ~last).any()]))


def _packed_last(batch_sizes: torch.Tensor) -> torch.Tensor:
    """[rows] of a packed batch of these sizes by time step: whether each row is its sequence's
    last step (the ``j``-th sequence of time ``t`` is not there at ``t + 1``)."""
    sizes = batch_sizes.long()
    times = torch.repeat_interleave(torch.arange(len(sizes)), sizes)  # [rows]
    starts = torch.cumsum(sizes, 0) - sizes  # each time step's first row
    within = torch.arange(int(sizes.sum())) - starts[times]  # j
    following = torch.cat([sizes[1:], sizes.new_zeros(1)])  # sequences still there at t + 1
    return within >= following[times]


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
