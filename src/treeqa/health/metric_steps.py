"""A learning-rate scheduler stepped with a metric (``scheduler-given-metric``).

Only ``ReduceLROnPlateau.step`` takes a metric. Every other scheduler's ``step`` still takes the
deprecated ``epoch``: ``scheduler.step(val_loss)``, left over from a plateau schedule or meant as
one, sets the scheduler's ``last_epoch`` to the loss and puts the rate where the schedule is at
that epoch (its closed form where it has one). A loss of 0.4 is epoch 0.4, every time: a
``StepLR``, ``CosineAnnealingLR`` or ``ExponentialLR`` stays at its start and never decays, a
``OneCycleLR`` or a ``LinearLR`` warm-up never leaves its first rate, and the rate moves with
the metric rather than with time.

The schedulers' common ``step`` is wrapped for the run (``rates.py``); each value given to it is
noted (a number, or a tensor of one value: one host read, once an epoch or once a step). From
the ``STEPS``-th such call on, each judges the scheduler's values so far (its first ``KEPT``),
until one finds them a metric: all whole numbers is an epoch count (``scheduler.step(epoch)``,
deprecated, right); otherwise a metric where a value fell from the one before or came twice (an
epoch given each step only rises), or where values all within [0, 1] rose by ever less (an
accuracy levelling off; a fractional epoch, ``epoch + i / batches``, rises by the same amount
each step). ``CosineAnnealingWarmRestarts`` takes fractional epochs by design and steps by its
own ``step``; so do ``ReduceLROnPlateau``, ``SequentialLR`` and ``ChainedScheduler``: none is
wrapped here.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler

from treeqa.health import sites
from treeqa.health.findings import Finding

STEPS = 3
"""Calls given a value before a scheduler is judged."""
KEPT = 12
"""The values kept for each scheduler (the first ones)."""
LEVELLING = 3.0
"""How many times smaller a rise in [0, 1] ends than it began, to be an accuracy levelling
off."""


class MetricSteps:
    """``report``: where the finding goes (``Updates._report``); ``kind(frame)``: what the
    script's line at ``frame`` gives, by its words ("lower": a loss; "higher": an accuracy)."""

    def __init__(self, report: Callable[..., None], kind: Callable[[FrameType | None], str]):
        self.report, self.kind = report, kind
        # each scheduler's values given so far (None once judged)
        self.values: weakref.WeakKeyDictionary[LRScheduler, list[float] | None] = (
            weakref.WeakKeyDictionary()
        )

    def stepped(
        self, scheduler: LRScheduler, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """``scheduler.step(*args, **kwargs)`` is about to run."""
        given = kwargs.get("epoch", args[0] if args else None)
        if given is None:
            return
        seen = self.values.get(scheduler, [])
        if seen is None:
            return
        value = _number(given)
        if value is None:
            return
        if len(seen) < KEPT:
            seen.append(value)
        self.values[scheduler] = seen
        if len(seen) < STEPS or not a_metric(seen):
            return
        self.values[scheduler] = None
        frame = sites.user_frame()
        where = "" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"
        self.report(scheduler_given_metric(scheduler, seen, self.kind(frame), where))


def a_metric(values: list[float]) -> bool:
    """Whether ``values`` given as epochs are a metric (see the module's text)."""
    if all(v == math.floor(v) for v in values):
        return False
    rises = [b - a for a, b in zip(values, values[1:], strict=False)]
    if min(rises) <= 0:
        return True
    levelling = len(values) >= 4 and rises[-1] * LEVELLING < rises[0]
    return levelling and all(0 <= v <= 1 for v in values)


def scheduler_given_metric(
    scheduler: LRScheduler, values: list[float], kind: str, where: str
) -> Finding:
    """The finding for ``scheduler``, given ``values`` (``kind``: see ``MetricSteps``)."""
    name = type(scheduler).__name__
    lr, base = (
        _number(scheduler.optimizer.param_groups[0].get("lr")),
        _number(scheduler.base_lrs[0]),
    )
    trail = ", ".join(f"{v:.4g}" for v in values[:6])
    given = {"lower": "a loss", "higher": "an accuracy or score"}.get(kind, "a metric")
    rate = f"; the rate is {lr:.3g} (its base {base:.3g})" if lr is not None and base else ""
    return Finding(
        "scheduler-given-metric",
        "warning",
        f"{name}.step was given {trail}, not whole epochs: {given}, "
        "which a scheduler other than ReduceLROnPlateau takes as the epoch to set "
        f"(step(epoch), deprecated), so each step puts the rate where the schedule is at that "
        f"'epoch', near its start, and it follows the metric instead of time{rate}",
        where=where,
        evidence={"scheduler": name, "values": values, "lr": lr, "base_lr": base, "metric": kind},
    )


def _number(given: Any) -> float | None:
    """``given`` as a float: a number, or a tensor (or NumPy value) of one value."""
    if isinstance(given, bool):
        return None
    if isinstance(given, int | float):
        return float(given)
    if isinstance(given, torch.Tensor) and given.numel() == 1:
        return float(given.detach().float().cpu())
    item = getattr(given, "item", None)
    if callable(item) and getattr(given, "size", 0) == 1:
        value = item()
        return float(value) if isinstance(value, int | float) else None
    return None
