"""``updates-rounded-away``: weights stored in bfloat16 or float16 (``model.to(torch.bfloat16)``,
``model.half()``) and stepped in place by the optimiser keep an update only where it is at least
half the format's spacing at the weight's value; a smaller one rounds back to the same number,
step after step, and the weight never moves. bfloat16 has 8 significant bits: at 1.0 (a norm's
weight) an update below 2^-8 = 0.0039 is lost, at 0.02 (a Linear weight) one below 6e-5. Adam's
updates are about its learning rate, so at 1e-3 the norms of a model so cast never train, and at
a fine-tuning rate of 1e-5 most of its weights do not. Nothing fails: the loss falls through the
weights that do move.

On the clock's sampled steps, after its step, up to ``ELEMENTS`` evenly spaced elements of each
of its half-precision parameters with a gradient at the first such step (the anchor; up to
``PARAMETERS`` of them; parameters added to the clock later, a group unfrozen, are not) are
read on the device: whether their values differ from the anchor's, and whether their gradients
are nonzero. At the run's end, or when the clock's parameters change (one host read), an
element is stuck where its gradient was nonzero at a sampled step and at the last one, its value
is not 0 (a pruning mask's zeros stay put by design), and it never differed from its anchor
value at a sampled step. Where the optimiser is Adam, AdamW or SGD, its own step at each
element is read from its state (``_update``, at the group's highest learning rate): an element
whose step is at least half the spacing is held by something else (a clamp, a projection after
the step) and is not judged, and one whose steps over the run would not add up to half the
spacing is no loss (weights at their optimum, whose float32 twin barely moves). A parameter with
``JUDGED`` or more elements judged (all of one with fewer), ``STUCK`` of them stuck, over
``STEPS`` sampled steps and ``SPAN`` steps of the clock, in a group whose learning rate was
above 0 at some sampled step, is named. Weights in float32 (autocast, an fp32 master copy that
the optimiser steps) are not read.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch import nn

from treeqa.health.findings import Finding

HALF = (torch.bfloat16, torch.float16)
ELEMENTS = 256
"""Elements read of each parameter, evenly spaced."""
PARAMETERS = 512
"""Parameters read, at most (evenly spaced over the optimiser's)."""
JUDGED = 8
"""Elements of a parameter judged (a nonzero gradient at a sampled step and at the last one, a
nonzero value), at least; every one of a parameter of fewer (a learned scale, one number)."""
STUCK = 0.2
"""Share of those that never moved for the parameter to be named (in float32, or with updates
that round stochastically or are compensated, next to none do over ``SPAN`` steps: 0 of 20
parameters' elements in the probes; an EmbeddingBag cast to bfloat16 and stepped by SGD kept
28% of its judged elements, and scored 0.58 against 0.75 in float32)."""
STEPS, SPAN = 4, 30
"""Sampled steps after the anchor, and steps of the clock from it to the last, at least."""
SHOWN = 6
"""Parameters named in the message."""


class Rounding:
    """``add``: where the finding goes (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.said = False
        self._reset()

    def _reset(self, key: tuple[int, ...] = ()) -> None:
        self.key = key  # ids of the clock's parameters when the anchor was taken
        self.optimizer: weakref.ref[torch.optim.Optimizer] | None = None
        self.params: list[weakref.ref[nn.Parameter]] = []
        self.names: list[str] = []
        self.dtypes: list[torch.dtype] = []
        self.index: list[torch.Tensor] = []  # [k] the elements read of each parameter
        self.groups: list[dict] = []  # each parameter's group
        self.rates: list[float] = []  # the highest learning rate its group had
        self.anchor: torch.Tensor | None = None  # [N] the values read at the anchor
        self.live_before: torch.Tensor | None = None  # [N] gradient nonzero at a sampled step
        self.last_live: torch.Tensor | None = None  # [N] ... at the last one
        self.moved: torch.Tensor | None = None  # [N] differed from the anchor at a sampled step
        self.first = self.last = self.steps = 0

    def stepped(
        self, step: int, optimizer: torch.optim.Optimizer, params: list[tuple[str, nn.Parameter]]
    ) -> None:
        """After the clock's sampled step ``step``; ``params``: the trained parameters' names.
        Parameters added to the clock (a group unfrozen later) leave those read as they were."""
        key = tuple(id(p) for g in optimizer.param_groups for p in g["params"])
        if key != self.key and self.anchor is not None and set(self.key) <= set(key):
            self.key = key
        if key != self.key or self.anchor is None:
            self.judge()
            self._reset(key)
            self._anchor(step, optimizer, params)
            return
        assert self.moved is not None and self.live_before is not None
        read = self._read()
        if read is None:  # a parameter read is gone (a model freed): start again
            self.judge()
            self._reset(key)
            return
        values, live = read
        self.moved |= values != self.anchor
        if self.last_live is not None:
            self.live_before |= self.last_live
        self.last_live = live
        self.last, self.steps = step, self.steps + 1
        for i, group in enumerate(self.groups):
            self.rates[i] = max(self.rates[i], _rate(group))

    def _anchor(
        self, step: int, optimizer: torch.optim.Optimizer, params: list[tuple[str, nn.Parameter]]
    ) -> None:
        half = [(p, g) for g in optimizer.param_groups for p in g["params"] if p.dtype in HALF]
        held = [(p, g) for p, g in half if p.grad is not None and p.numel() > 0]
        held = [(p, g) for p, g in held if not p.grad.is_sparse and p.device == held[0][0].device]
        if not held:
            return
        if len(held) > PARAMETERS:
            held = [held[i * len(held) // PARAMETERS] for i in range(PARAMETERS)]
        names = {id(p): n for n, p in params}
        self.optimizer = weakref.ref(optimizer)
        for p, g in held:
            n = p.numel()
            k = min(n, ELEMENTS)
            self.params.append(weakref.ref(p))
            self.names.append(names.get(id(p), f"a {list(p.shape)} parameter"))
            self.dtypes.append(p.dtype)
            self.index.append(torch.arange(k, device=p.device) * n // k)
            self.groups.append(g)
            self.rates.append(_rate(g))
        read = self._read()
        if read is None:
            self._reset(self.key)
            return
        self.anchor, self.live_before = read
        self.moved = torch.zeros_like(self.live_before)
        self.first = self.last = step

    def _read(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The values read ([N]) and whether their gradients are nonzero ([N] bool); elements
        taken in the logical order, whatever the memory layout (a channels-last convolution's)."""
        values, live = [], []
        for ref, index in zip(self.params, self.index, strict=True):
            p = ref()
            if p is None or p.numel() <= index[-1]:  # gone, or resized since the anchor
                return None
            values.append(torch.take(p.detach(), index).float())
            grad = p.grad
            if grad is None or grad.is_sparse or grad.shape != p.shape:
                live.append(torch.zeros(len(index), dtype=torch.bool, device=p.device))
            else:
                live.append(torch.take(grad.detach(), index) != 0)
        return torch.cat(values), torch.cat(live)

    def _update(self, i: int) -> torch.Tensor | None:
        """[k] the size of the step the clock's optimiser takes at parameter ``i``'s elements
        read, from its state after its last step and its group's highest learning rate, where
        it is Adam's, AdamW's or SGD's:
        ``lr * |m| / (sqrt(v) + eps)`` with the bias corrections, ``lr * |momentum buffer|``
        or ``lr * |grad|``; None for any other (not read)."""
        optimizer = self.optimizer() if self.optimizer is not None else None
        p = self.params[i]()
        if optimizer is None or p is None:
            return None
        state, group, index = optimizer.state.get(p, {}), self.groups[i], self.index[i]
        lr = self.rates[i]  # (a schedule may have ended at 0)
        if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and "exp_avg_sq" in state:
            step = float(state["step"])
            beta1, beta2 = group["betas"]
            m = torch.take(state["exp_avg"], index).float().abs() / (1 - beta1**step)
            v = torch.take(state["exp_avg_sq"], index).float() / (1 - beta2**step)
            return (lr * m / (v.sqrt() + group["eps"])).cpu()
        if isinstance(optimizer, torch.optim.SGD):
            moved_by = state.get("momentum_buffer", p.grad)
            if isinstance(moved_by, torch.Tensor) and not moved_by.is_sparse:
                return (lr * torch.take(moved_by.detach(), index).float().abs()).cpu()
        return None

    def judge(self) -> None:
        """Name the parameters whose read elements stayed put (a host read, and one for each
        parameter whose optimiser's own update is read)."""
        if self.said or self.anchor is None or self.moved is None or self.last_live is None:
            return
        assert self.live_before is not None
        if self.steps < STEPS or self.last - self.first < SPAN:
            return
        judged = self.live_before & self.last_live & (self.anchor != 0)
        stuck = judged & ~self.moved
        table = torch.stack([judged.float(), stuck.float(), self.anchor]).cpu()
        found, start = [], 0
        for i, index in enumerate(self.index):
            part = table[:, start : start + len(index)]
            start += len(index)
            if self.rates[i] <= 0:
                continue
            judged_i, stuck_i = part[0] > 0, part[1] > 0
            if not _named(judged_i, stuck_i):
                continue
            update = self._update(i)  # [k] the optimiser's own step there, where it is known
            if update is not None:
                half = _half_spacing(part[2].abs(), self.dtypes[i])
                # stuck though its step would move it: held there by a clamp, a projection
                held = stuck_i & (update >= half)
                lost = update * (self.last - self.first) >= half  # more than float32 moves
                judged_i, stuck_i = judged_i & ~held, stuck_i & ~held & lost
            if _named(judged_i, stuck_i):
                n_judged, n_stuck = int(judged_i.sum()), int(stuck_i.sum())
                at = part[2][stuck_i].abs().median().item()
                found.append((i, n_judged, n_stuck, at))
        if not found:
            return
        self.said = True
        found.sort(key=lambda f: -f[2] / f[1])  # the most stuck first
        first, _, _, at = found[0]
        kind = _format(self.dtypes[first])
        shown = ", ".join(f"{self.names[i]} ({s / j:.0%})" for i, j, s, _ in found[:SHOWN])
        more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        self.add(
            Finding(
                "updates-rounded-away",
                "warning",
                f"{len(found)} of the {len(self.params)} {kind} parameters the optimiser steps "
                f"have weights that never moved from step {self.first} to step {self.last} "
                f"though their gradients were nonzero (the share of the elements read): "
                f"{shown}{more}. An update below half the {kind} spacing at a weight rounds back "
                f"to it: {_half_spacing(torch.tensor(at), self.dtypes[first]).item():.2g} at "
                f"{at:.3g}, the first's typical size, against a learning rate of "
                f"{self.rates[first]:.2g}",
                evidence={
                    "parameters": [self.names[i] for i, *_ in found],
                    "stuck": [s for _, _, s, _ in found],
                    "judged": [j for _, j, _, _ in found],
                    "steps": [self.first, self.last],
                    "lr": self.rates[first],
                },
                step=self.last,
            )
        )


def _named(judged: torch.Tensor, stuck: torch.Tensor) -> bool:
    """Whether a parameter's elements read, ``judged`` ([k] bool) and ``stuck``, name it."""
    n = int(judged.sum())
    return n >= min(JUDGED, len(judged)) and n > 0 and int(stuck.sum()) >= STUCK * n


def _rate(group: dict) -> float:
    lr = group.get("lr", 0.0)
    return float(lr) if lr is not None else 0.0


def _format(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _half_spacing(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Half the distance from each of ``values`` (> 0) to the next ``dtype`` number above it."""
    return torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(values))) / 2
