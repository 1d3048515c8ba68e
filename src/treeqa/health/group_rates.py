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
``lr_scale``). Groups made ``SPREAD`` times apart or more are watched at the clock's steps, on
the rates ``rates.py`` reads there: at the first step whose rates are not all 0 (a warm-up from 0
puts every group at 0, rightly), all at one rate make the finding; later, each group's rate
moved to one where at the step before they were apart and none at 0 (a hand-made plateau
schedule that writes its cut rate into every group). A schedule that scales each group's own
rate keeps them apart; groups made alike and moved apart later are not watched; a frozen group
at 0 set to the others' rate, or a backbone's rate raised to its head's (the head's unmoved), at
a phase change on purpose, is not the finding.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health.findings import Finding

SPREAD = 2.0
"""How many times apart the groups' rates were made, at least (a group at 0: any other)."""
SCALES = ("lr_scale", "lr_mult", "lr_multiplier")
"""A group's keys for a factor of the rate that a schedule of the script's own applies."""
PATTERN = r"""\[\s*["']lr["']\s*\]\s*=(?!=)"""
"""A line of the script that writes a group's rate."""


class GroupRates:
    """``report``: where the finding goes (``Updates._report``); ``written_at(pattern)``: the
    script's first line matching ``pattern``."""

    def __init__(self, report: Callable[..., None], written_at: Callable[[str], str]):
        self.report, self.written_at = report, written_at
        # each optimiser's groups' rates as it added them (a scale's product), then, once it
        # has stepped, its rates at its last step; None once judged
        self.built: weakref.WeakKeyDictionary[torch.optim.Optimizer, list[Any] | None] = (
            weakref.WeakKeyDictionary()
        )
        self.last: weakref.WeakKeyDictionary[torch.optim.Optimizer, list[float]] = (
            weakref.WeakKeyDictionary()
        )
        self.watched = 0  # optimisers not judged yet (the clock's steps skip the call at 0)

    def added(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer`` added a group (its last)."""
        if optimizer not in self.built:
            self.watched += 1
        rates = self.built.get(optimizer, [])
        if rates is not None and optimizer not in self.last:
            group = optimizer.param_groups[-1]
            lr: Any = group.get("lr")
            scale: Any = next((group[k] for k in SCALES if k in group), 1)  # (MAE's layer decay)
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
        if len(numbers) < 2 or len(numbers) < len(built) or not _apart(numbers):
            self._judged(optimizer)
        elif len(rates) < len(held) or len(rates) != len(numbers):
            self._judged(optimizer)  # (a tensor rate is not read; a group added since)
        elif any(v != 0 for v in rates):  # (a warm-up from 0: its next step tells)
            last = self.last.get(optimizer)
            self.last[optimizer] = rates
            # At the first step; or later, each group's rate moved to one, from rates apart of
            # which none was 0 (a schedule's write: a frozen group unfrozen to the others' rate,
            # or a backbone raised to its head's, on purpose, moves one group)
            moved = last is not None and min(last) > 0 and not _alike(last)
            moved = moved and all(a != b for a, b in zip(rates, last or [], strict=True))
            if _alike(rates) and (last is None or moved):
                self._judged(optimizer)
                cycled = "max_lr" in optimizer.param_groups[0]  # OneCycleLR's, CyclicLR's key
                found = group_rates_flattened(
                    optimizer, numbers, rates[0], step, cycled, last is None
                )
                found.where = self.written_at(PATTERN)
                self.report(found)

    def _judged(self, optimizer: torch.optim.Optimizer) -> None:
        self.built[optimizer] = None
        self.watched -= 1


def _alike(rates: list[float]) -> bool:
    return all(math.isclose(v, rates[0]) for v in rates)


def _apart(rates: list[float]) -> bool:
    low, high = min(rates), max(rates)
    return high > 0 and (low <= 0 or high >= SPREAD * low)


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
        f"at step {step}, the first read, it"
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
