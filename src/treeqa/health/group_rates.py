"""Parameter groups made with learning rates of their own, all run at one (``group-rates-flattened``).

An optimiser given groups at different rates (a pretrained backbone at 1e-5 beside a new head at
1e-3, layer-wise decay, a frozen group at 0) and a schedule written by hand that puts one value
into every group, ``for g in optimizer.param_groups: g["lr"] = lr``, never trains at those
rates: from its first step every group runs at the schedule's one rate, and the backbone is
trained as fast as the head (its pretrained features lost), or the head as slowly as the
backbone. So does a ``OneCycleLR`` or ``CyclicLR`` given one ``max_lr`` for all the groups.

Each optimiser's groups' rates are noted as it adds them (``Optimizer.add_param_group``, which
its constructor calls for each group, is wrapped for the run by ``lr_writes.py``), times a
factor the group holds for a schedule of the script's own (``SCALES``: MAE's layer-wise
``lr_scale``; not for an optimiser class of the script's, which may apply it in its step).
Where two groups were made above 0 and ``SPREAD`` times apart or more, those groups' rates are
read at each of the clock's steps (the list ``rates.py`` reads there): ``READS`` reads in a row
within ``ALIKE`` of one rate, from the first or second read whose rates are not all 0 (a
warm-up from 0 puts every group at 0, rightly; Lightning's documented warm-up writes its rate
into every group after the first step), or from a later read where each group's rate moved to one from rates
apart (a plateau schedule by hand whose first cut writes its rate into every group) and that
rate is ``SPREAD`` times the slowest group's or more (a floor, ``min_lr`` or a cosine's
``eta_min``, or a last phase at one low rate, is below it), make the finding, said when the
clock's run ends unless the groups run apart again before (a learning-rate range test at one
rate, then training at each group's). A schedule that scales each group's own rate keeps them
apart; groups made alike and set apart later are not watched; a frozen group at 0 set to the
others' rate, or a backbone's rate raised to its head's (the head's unmoved) at a phase change
on purpose, is not the finding; nor is a warm-up that starts every group at one small rate and
takes each to its own.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from treeqa.health.findings import Finding

SPREAD = 2.0
"""How many times apart the groups' rates were made, at least (a group at 0: any other)."""
READS = 3
"""Reads in a row at one rate that make the finding (a warm-up from one small rate for every
group to each group's own moves them apart at its second step)."""
ALIKE = 0.01
"""Rates within this share of one another are one rate (a floor added to a decay)."""
SCALES = ("lr_scale", "lr_mult", "lr_multiplier")
"""A group's keys for a factor of the rate that a schedule of the script's own applies."""
PATTERN = r"""\[\s*["']lr["']\s*\]\s*=(?!=)"""
"""A line of the script that writes a group's rate."""


@dataclass(slots=True)
class Reading:
    """A watched optimiser's rates as last read (of its groups made above 0), ``alike`` reads
    in a row at one rate (-1: at one rate, but neither from the start nor by a write into every
    group), whether that run began in its ``first`` two reads, the step it began at
    (``since``), and its ``reads`` so far."""

    rates: list[float]
    alike: int = 0
    first: bool = False
    since: int = 0
    reads: int = 0


class GroupRates:
    """``report``: where the finding goes (``Updates._report``); ``written_at(pattern)``: the
    script's first line matching ``pattern``."""

    def __init__(self, report: Callable[..., None], written_at: Callable[[str], str]):
        self.report, self.written_at = report, written_at
        # each optimiser's groups' rates as it added them (a scale's product); None once judged
        self.built: weakref.WeakKeyDictionary[torch.optim.Optimizer, list[Any] | None] = (
            weakref.WeakKeyDictionary()
        )
        self.reads: weakref.WeakKeyDictionary[torch.optim.Optimizer, Reading] = (
            weakref.WeakKeyDictionary()
        )
        self.watched = 0  # optimisers not judged yet (the clock's steps skip the call at 0)
        # the finding of each optimiser whose groups run at one rate, said when the clock's run
        # ends unless they run apart again first (a range test before training, by its id)
        self.pending: dict[int, Finding] = {}

    def added(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer`` added a group (its last)."""
        if optimizer not in self.built:
            self.watched += 1
        rates = self.built.get(optimizer, [])
        if rates is not None and optimizer not in self.reads:
            group = optimizer.param_groups[-1]
            lr: Any = group.get("lr")
            # (a factor a schedule of the script's own applies: not one an optimiser of its own
            # class applies in its step)
            own = type(optimizer).__module__.startswith("torch.optim")
            scale: Any = next((group[k] for k in SCALES if k in group), 1) if own else 1
            numbers = type(lr) in (float, int) and type(scale) in (float, int)
            rates.append(float(lr * scale) if numbers else None)
            self.built[optimizer] = rates

    def stepped(self, step: int, optimizer: torch.optim.Optimizer, held: list[Any]) -> None:
        """After the clock ``optimizer``'s step ``step``, at rates ``held`` (one dict lookup
        where not watched)."""
        built = self.built.get(optimizer)
        if built is None:
            return
        numbers = [float(v) for v in built if type(v) is float or type(v) is int]
        rates = [float(v) for v in held if type(v) is float or type(v) is int]
        made = [v for v in numbers if v > 0]
        if len(numbers) < len(built) or len(made) < 2 or max(made) < SPREAD * min(made):
            self._judged(optimizer)  # (no two groups made apart; a rate not a number)
            return
        if len(rates) < len(held) or len(rates) != len(numbers):
            self._judged(optimizer)  # (a tensor rate is not read; a group added since)
            return
        # The groups made at rates above 0 (a frozen one at 0 is set apart on purpose)
        now = [r for r, v in zip(rates, numbers, strict=True) if v > 0]
        if not any(now):
            return  # (a warm-up from 0: its next step tells)
        reading = self.reads.setdefault(optimizer, Reading([]))
        last, reading.rates = reading.rates, now
        reading.reads += 1
        if not (min(now) > 0 and _alike(now)):
            reading.alike = 0
            self.pending.pop(id(optimizer), None)  # apart again: one rate was a phase
            return
        if reading.alike == 0:  # one rate from this read on: from the start, or by a write
            # into each (Lightning's documented warm-up writes its rate after the first step)
            reading.first, reading.since = reading.reads <= 2, step
            if not reading.first and not _written_to_each(last, now):
                reading.alike = -1  # (one group moved to the others' rate: set so on purpose)
        if reading.alike >= 0:
            reading.alike += 1
        # Later in the run, a schedule's floor (rates cut to one min_lr, a cosine to its
        # eta_min) or a final phase at one low rate is no flattening: only a rate well above
        # the slowest group's counts there.
        high = reading.first or now[0] >= SPREAD * min(made)
        if reading.alike >= READS and high and id(optimizer) not in self.pending:
            cycled = "max_lr" in optimizer.param_groups[0]  # OneCycleLR's, CyclicLR's key
            found = group_rates_flattened(
                optimizer, numbers, now[0], reading.since, cycled, reading.first
            )
            found.where = self.written_at(PATTERN)
            self.pending[id(optimizer)] = found

    def finish(self) -> None:
        """The clock's run ended: the groups still at one rate are said."""
        for found in self.pending.values():
            self.report(found, at_step=False)
        self.pending.clear()

    def _judged(self, optimizer: torch.optim.Optimizer) -> None:
        self.built[optimizer] = None
        self.watched -= 1


def _alike(rates: list[float]) -> bool:
    return all(math.isclose(v, rates[0], rel_tol=ALIKE) for v in rates)


def _written_to_each(last: list[float], now: list[float]) -> bool:
    """Whether rates apart, none at 0, moved each to one (a schedule's write into every group)."""
    apart = min(last) > 0 and not _alike(last)
    return apart and all(a != b for a, b in zip(now, last, strict=True))


def group_rates_flattened(
    optimizer: torch.optim.Optimizer,
    built: list[float],
    lr: float,
    step: int,
    cycled: bool,
    first: bool,
) -> Finding:
    """The finding: ``optimizer``'s groups, made at ``built``, at ``lr`` at ``step`` (``first``:
    the first step at rates not all 0; else the step they were first alike)."""
    name = type(optimizer).__name__
    made = ", ".join(f"{v:.3g}" for v in built[:6]) + (", ..." if len(built) > 6 else "")
    how = (
        "a OneCycleLR or CyclicLR given one max_lr sets every group alike"
        if cycled
        else "a schedule written by hand puts one rate into every group "
        '(for g in optimizer.param_groups: g["lr"] = lr)'
    )
    when = (
        f"from its first steps (step {step} on) it"
        if first
        else f"from step {step} on, rates apart until then, it"
    )
    low, high = min(built), max(built)
    apart = (
        "a group made at 0 (frozen) trains"
        if low <= 0
        else f"rates made {high / low:.3g}x apart run alike"
    )
    return Finding(
        "group-rates-flattened",
        "warning",
        f"{name}'s {len(built)} parameter groups were made with learning rates {made}, but "
        f"{when} "
        f"ran every group at {lr:.3g}: {how}, so the groups' own rates "
        f"{'never apply' if first else 'apply no more'}: {apart} (a pretrained backbone given "
        "a smaller rate than its head trains as fast as the head, or the head as slowly as the "
        "backbone)",
        evidence={
            "optimizer": name,
            "rates_made": built[:20],
            "lr": lr,
            "step": step,
            "from_the_first_step": first,
        },
    )
