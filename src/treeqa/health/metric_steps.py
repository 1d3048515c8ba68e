"""A learning-rate scheduler stepped with a metric (``scheduler-given-metric``).

Only ``ReduceLROnPlateau.step`` takes a metric. Every other scheduler's ``step`` still takes the
deprecated ``epoch``: ``scheduler.step(val_loss)``, left over from a plateau schedule or meant as
one, sets the scheduler's ``last_epoch`` to the loss and puts the rate where the schedule is at
that epoch (its closed form where it has one). A loss of 0.4 is epoch 0.4, every time: a
``StepLR``, ``CosineAnnealingLR`` or ``ExponentialLR`` stays at its start and never decays, a
``OneCycleLR`` or a ``LinearLR`` warm-up never leaves its first rate, and the rate moves with
the metric rather than with time.

The schedulers' common ``step`` is wrapped for the run (``rates.py``), and
``CosineAnnealingWarmRestarts.step``, its own; each value given to them is noted (a number, or a
tensor of one value: one host read, once an epoch or once a step). From the ``STEPS``-th such
call on, each judges the scheduler's values so far (its first ``KEPT``), until one finds them a
metric. Whole numbers are epochs (``scheduler.step(epoch)``, deprecated, right) unless one fell
to above 1 (a count of correct answers, a loss rounded; a second phase counted anew from 0 or 1
is epochs). Others are a metric where one fell from the one before or came twice (an epoch given
each step only rises, by the same amount each step: ``epoch + i / batches``), or where the last
``RISES`` rises or more each came smaller than the one before, the last ``LEVELLING`` times
smaller than the first or more (an accuracy or PSNR levelling off; an epoch's short last batch
makes one small rise, then a full one). ``ReduceLROnPlateau`` takes a metric, and
``SequentialLR`` and ``ChainedScheduler`` take no value (they raise): none is wrapped here.
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

STEPS = 2
"""Calls given a value before a scheduler is judged."""
RISES = 4
"""Rises in a row, each smaller than the one before, that make a metric levelling off."""
KEPT = 12
"""The values kept for each scheduler (the first ones)."""
LEVELLING = 3.0
"""How many times smaller the last of those rises is than the first, at least."""


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
    rises = [b - a for a, b in zip(values, values[1:], strict=False)]
    if all(v == math.floor(v) for v in values):  # whole numbers: a count that fell (to 0 or
        return any(r < 0 and b > 1 for r, b in zip(rises, values[1:], strict=True))  # 1: anew)
    if min(rises) <= 0:
        return True
    shrinking = all(b < a for a, b in zip(rises, rises[1:], strict=False))
    return len(rises) >= RISES and shrinking and rises[-1] * LEVELLING <= rises[0]


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
        f"{name}.step was given {trail}: {given}, not an epoch count, which a scheduler "
        "other than ReduceLROnPlateau takes as the epoch to set "
        "(step(epoch), deprecated), so each step puts the rate where the schedule stands at "
        f"that 'epoch' (a loss below 1: its start), and it follows the metric, not time{rate}",
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
