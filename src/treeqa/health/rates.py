"""The learning rates of ``treeqa doctor``'s clock (the optimiser whose steps count), read after
each of its steps, and the schedulers that set them.

``LearningRates`` is driven by ``Updates`` and reports through it:

- ``maximize``: on sampled steps, whether a parameter group of the clock has
  ``maximize=True`` (it climbs the loss), for the monitor's ``loss-diverged`` to say.
- ``lr-negative``: a parameter group's learning rate went below zero (a linear decay stepped
  past its end), so the optimiser climbs the loss.
- ``lr-zero``: every group's learning rate has been 0 since the first step (``lr=0``, or a
  warm-up from 0 whose scheduler is never stepped): the optimiser changes nothing.
- ``lr-collapsed``: the clock's learning rate (its largest group's) fell below
  ``slips.LR_FLOOR`` of its peak and stayed there for a fifth of the run so far. A
  ``ReduceLROnPlateau`` stepped less often than every other optimiser step (once an epoch)
  cuts because the metric stopped improving, by design: its optimiser is not judged.
  ``ReduceLROnPlateau.step`` is wrapped for the run to count its calls per optimiser.
- ``lr-schedule-past-end``: a ``CosineAnnealingLR`` stepped well past its ``T_max`` (meant
  per epoch, stepped every batch), so its rate climbs back up and cycles. The schedulers'
  common ``step`` is wrapped for the run to read each one's count.
- ``lr-schedule-stalled``: a ``OneCycleLR`` of the clock stepped far fewer times than the
  clock (built, then never stepped, or stepped once an epoch), judged when the clock's run
  ends.
- ``lr-lambda-returns-rate``: a ``LambdaLR`` whose factors stay tiny (at most
  ``RATE_FACTOR``, and no longer rising) over an optimiser given a rate of its own: its
  ``lr_lambda`` returns a learning rate, which the scheduler multiplies by the optimiser's,
  so the run trains at the rate squared. The factor of the group with the largest base rate is read after each of the
  scheduler's steps (``get_last_lr``, where its own step put it: inside a ``SequentialLR`` too).
- ``plateau-mode-reversed``: a ``ReduceLROnPlateau``'s first cut came after values that, by
  its mode, never improved on the first and went the other way while the training loss fell
  (a loss given to ``mode="max"``; an accuracy to ``mode="min"``). Its ``step`` is noted after
  it returns, with the metric it was given.

Per step this costs a few attribute reads.
"""

from __future__ import annotations

import linecache
import re
import weakref
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import (
    CosineAnnealingLR,
    CosineAnnealingWarmRestarts,
    LambdaLR,
    LRScheduler,
    OneCycleLR,
    ReduceLROnPlateau,
)

from treeqa.health import sites, slips
from treeqa.health.findings import Finding
from treeqa.health.group_rates import GroupRates
from treeqa.health.hand import HandUpdates
from treeqa.health.lr_writes import LrWrites, user_files, written_at
from treeqa.health.metric_steps import MetricSteps
from treeqa.health.wrap import Wrappers, note_calls, note_function_results

ZERO_STEPS = 50
"""Steps from the first with every group's learning rate at 0 (a warm-up from 0 is above it
after its first step)."""
RATE_FACTOR = 0.05
"""A LambdaLR's largest factor, at most, for ``lr-lambda-returns-rate``: a schedule of factors
reaches about 1 (after its warm-up), a learning rate is 1e-2 to 1e-6."""
RATE_STEPS = 20
"""Its steps before it is judged (one stepped once an epoch takes few)."""
RATE_PRODUCT = 2e-4
"""The rate trained at (the optimiser's times the largest factor), at most: a rate returned
over an optimiser given it too is that rate squared (1e-6 for 1e-3; 1e-4 for SGD's 0.01),
while a factor below 0.05 meant as one (the linear-scaling rule's batch / 256 folded into the
lambda, over SGD's 0.1) leaves a rate that trains."""
RATE_BASE = 0.1
"""The optimiser's own rate, at most: one given lr=1.0 (or 0.5) for its LambdaLR to return the
rate is right (the Annotated Transformer's ``rate()``)."""


class LearningRates:
    """``report``: where findings go (``Updates._report``: once per code); ``alone(o)``: no
    optimiser but ``o`` has stepped in the run."""

    def __init__(
        self,
        report: Callable[..., None],
        alone: Callable[[torch.optim.Optimizer], bool],
        losses: Callable[[], Sequence[float]] = list,
    ):
        """``losses()``: the training losses of the clock's run so far."""
        self.report, self.alone, self.losses = report, alone, losses
        # ReduceLROnPlateau.step calls per optimiser it drives (weak: a finished run's optimiser)
        self.plateau_steps: weakref.WeakKeyDictionary[torch.optim.Optimizer, int] = (
            weakref.WeakKeyDictionary()
        )
        # the metrics each ReduceLROnPlateau was given, until its first cut
        self.plateau_values: weakref.WeakKeyDictionary[ReduceLROnPlateau, list[float]] = (
            weakref.WeakKeyDictionary()
        )
        # where the script first steps a scheduler of each optimiser (``lr-collapsed``'s place)
        self.scheduler_sites: weakref.WeakKeyDictionary[torch.optim.Optimizer, str] = (
            weakref.WeakKeyDictionary()
        )
        # The clock, and each OneCycleLR stepping it: (name, total_steps, its steps, the lr
        # and the schedule's peak at its last step), for ``lr-schedule-stalled``
        self.clock: weakref.ref[torch.optim.Optimizer] | None = None
        self.one_cycles: dict[int, tuple[str, int, int, float, float]] = {}
        # OneCycleLRs stepped before any clock (their constructor steps them once): adopted at
        # the clock's first step if they schedule it, so one never stepped again is judged
        self.unclocked: list[weakref.ref[OneCycleLR]] = []
        # each LambdaLR's (steps, largest factor, the step it came at), for
        # ``lr-lambda-returns-rate`` (None once judged)
        self.factors: weakref.WeakKeyDictionary[LambdaLR, list[float] | None] = (
            weakref.WeakKeyDictionary()
        )
        # told of every scheduler step before it runs (the doctor's ``Resumes``)
        self.scheduler_noted: Callable[[LRScheduler], None] | None = None
        self.writes = LrWrites(report)  # rates written where the optimiser does not read them
        # schedulers other than a plateau's given a metric
        self.metrics = MetricSteps(report, metric_kind)
        # groups made at rates of their own, run at one
        self.groups = GroupRates(report, lambda pattern: written_at(pattern, user_files()))
        self.writes.added = self.groups.added
        self.reset(0)

    def install(self, wrappers: Wrappers) -> None:
        wrappers.add(note_function_results(ReduceLROnPlateau, "step", self._plateau_stepped))
        wrappers.add(note_calls(LRScheduler, "step", self._scheduler_stepped))
        wrappers.add(note_calls(CosineAnnealingWarmRestarts, "step", self._restarts_stepped))
        self.writes.install(wrappers)

    def reset(self, step: int) -> None:
        """A new clock, whose first step is ``step + 1``: the last one's schedules judged."""
        self._one_cycles_judged(step)
        self.groups.finish()
        self.peak, self.floor, self.first = 0.0, 0.0, step + 1
        self.low_since: int | None = None  # the lr is below LR_FLOOR x peak since this step
        self.plateau = 0  # ReduceLROnPlateau steps of the clock's optimiser (at its last step)
        self.decayed_by_hand = False  # the low rate is the step size of updates by hand
        self.zero_steps = 0  # steps at lr 0 in every group, from the first
        self.maximize = ""  # the clock's class name when a group of it has maximize=True
        self.maximize_weights = False  # such a group holds an nn.Parameter

    def _plateau_stepped(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], _: Any
    ) -> None:
        """``ReduceLROnPlateau.step`` has returned (``args``: the scheduler, its metric)."""
        scheduler = args[0]
        optimizer = scheduler.optimizer
        self.plateau_steps[optimizer] = self.plateau_steps.get(optimizer, 0) + 1
        self._note_scheduler_site(optimizer)
        values = self.plateau_values.setdefault(scheduler, [])
        if values is _CUT:
            return
        values.append(float(kwargs.get("metrics", args[1] if len(args) > 1 else "nan")))
        # A cut: no bad epochs left, and this value not the best (a new best resets them too)
        if scheduler.num_bad_epochs == 0 and scheduler.best != values[-1]:
            self.plateau_values[scheduler] = _CUT
            if scheduler.best == values[0]:  # never improved on the first
                kind = metric_kind(sites.user_frame())
                found = slips.plateau_mode_reversed(scheduler.mode, values, self.losses(), kind)
                if found is not None:
                    found.where = self.scheduler_sites.get(optimizer, "")
                self.report(found)

    def _note_scheduler_site(self, optimizer: torch.optim.Optimizer) -> None:
        """The script's line of a scheduler's first step on ``optimizer`` (once: a walk of
        the frames)."""
        if optimizer not in self.scheduler_sites:
            self.scheduler_sites[optimizer] = sites.user_site(2)

    def _scheduler_stepped(self, scheduler: LRScheduler, *args: Any, **kwargs: Any) -> None:
        # Before the call: this one makes it last_epoch + 1 steps.
        if args or kwargs:  # (a value given: the deprecated epoch, or a metric meant for one)
            self.metrics.stepped(scheduler, args, kwargs)
        if self.scheduler_noted is not None:
            self.scheduler_noted(scheduler)
        if scheduler.last_epoch >= 0:  # (not the step its constructor takes)
            self._note_scheduler_site(scheduler.optimizer)
        clock = self.clock() if self.clock is not None else None
        if isinstance(scheduler, OneCycleLR) and clock is None:
            self.unclocked.append(weakref.ref(scheduler))
        if isinstance(scheduler, OneCycleLR) and clock is not None and scheduler.optimizer is clock:
            self.one_cycles[id(scheduler)] = _cycle(scheduler, scheduler.last_epoch + 1)
        if type(scheduler) is CosineAnnealingLR:
            name, t_max = type(scheduler).__name__, int(scheduler.T_max)
            self.report(slips.lr_schedule_past_end(name, t_max, scheduler.last_epoch + 1))
        if isinstance(scheduler, LambdaLR) and scheduler.last_epoch >= 0:
            self._lambda_stepped(scheduler)

    def _restarts_stepped(
        self, scheduler: CosineAnnealingWarmRestarts, *args: Any, **kwargs: Any
    ) -> None:
        """Its own ``step`` (fractional epochs by design): a metric given to it is read too."""
        if args or kwargs:
            self.metrics.stepped(scheduler, args, kwargs)

    def _lambda_stepped(self, scheduler: LambdaLR) -> None:
        """A LambdaLR is about to step: the factor its last step set is read
        (``lr-lambda-returns-rate``)."""
        seen = self.factors.get(scheduler)
        if seen is None and scheduler in self.factors:
            return
        if seen is None:  # its first step: one resumed past its start (a cosine's tail) is not
            seen = [0, 0.0, 0]  # read: its largest factors are behind it
            if scheduler.last_epoch > 1:
                self.factors[scheduler] = None
                return
        bases = [float(b) for b in scheduler.base_lrs]
        group = max(range(len(bases)), key=bases.__getitem__)
        base, step = bases[group], scheduler.last_epoch
        lr = scheduler.get_last_lr()[group]
        if not 0 < base <= RATE_BASE or not isinstance(lr, (float, int)):
            self.factors[scheduler] = None  # (a tensor rate is not read)
            return
        seen[0] += 1
        factor = float(lr) / base
        if factor > seen[1]:
            seen[1], seen[2] = factor, step
        peak = seen[1]
        # (a factor above RATE_FACTOR once: a schedule of factors, not read again)
        self.factors[scheduler] = seen if peak <= RATE_FACTOR else None
        if seen[0] < RATE_STEPS or not 0 < peak <= RATE_FACTOR or base * peak > RATE_PRODUCT:
            return
        # No rise over the last third of its steps: not a warm-up still on its way to 1 (over
        # a warm-up longer than the run, the factor passes the optimiser's own lr by chance).
        if step - seen[2] >= step / 3:
            near = 0.25 <= peak / base <= 4  # the lambda multiplies by the optimiser's own lr
            self.factors[scheduler] = None
            self.report(_returns_rate(scheduler, group, base, peak, step, near))

    def note(self, step: int, sampled: bool, optimizer: torch.optim.Optimizer) -> None:
        """After the clock ``optimizer``'s step ``step`` (``sampled``: the monitor sampled it)."""
        # The largest group's: a group frozen at lr 0 beside one that trains is no collapse.
        # A tensor lr (capturable optimisers) is not read.
        if self.clock is None or self.clock() is not optimizer:
            self.clock = weakref.ref(optimizer)
        lrs = [g.get("lr") for g in optimizer.param_groups]
        if self.groups.watched:
            self.groups.stepped(step, optimizer, lrs)
        if sampled:  # (said with loss-diverged, at the run's end)
            self.writes.note(step, optimizer)
            climbing = [g for g in optimizer.param_groups if g.get("maximize") is True]
            self.maximize = type(optimizer).__name__ if climbing else ""
            # (an input ascended on purpose, an attack's perturbation, is no nn.Parameter)
            self.maximize_weights = any(
                isinstance(p, nn.Parameter) for g in climbing for p in g["params"]
            )
        numbers = [float(v) for v in lrs if type(v) is float or type(v) is int]
        if not numbers:
            return
        lowest, lr = min(numbers), max(numbers)
        if lowest < 0:  # not also "almost no step size" (it went through 0 on the way)
            self.report(slips.lr_negative(lowest, step, isinstance(optimizer, HandUpdates)))
            self.low_since = None
            return
        if lr == 0 and self.peak == 0:  # at 0 from the first step: nothing has trained yet
            self.zero_steps += 1
            # Another optimiser that steps may train on purpose while this one waits at 0.
            if self.zero_steps == ZERO_STEPS and self.alone(optimizer):
                self.report(slips.lr_zero(self.zero_steps))
        if lr > self.peak:
            self.peak, self.low_since, self.floor = lr, None, slips.LR_FLOOR * lr
        elif self.low_since is None:
            if lr < self.floor:
                self.low_since = step
        elif lr >= self.floor:
            self.low_since = None  # warm restarts: it comes back
        if self.low_since is not None:
            self.plateau = self.plateau_steps.get(optimizer, 0)
            self.decayed_by_hand = isinstance(optimizer, HandUpdates)
            if sampled:
                self.report(self.collapsed(step))

    def collapsed(self, step: int) -> Finding | None:
        steps = step - self.first + 1
        if 0 < self.plateau < steps / 2:  # a plateau scheduler stepped once an epoch
            return None
        found = slips.lr_collapsed(
            self.peak, self.low_since, step, self.first, self.plateau, self.decayed_by_hand
        )
        clock = self.clock() if self.clock is not None else None
        if found is not None and clock is not None:  # where its scheduler is stepped
            found.where = self.scheduler_sites.get(clock, "")
        return found

    def finish(self, step: int) -> None:
        """The script ended at the clock's step ``step``."""
        if self.low_since is not None:
            self.report(self.collapsed(step), at_step=False)
        self.writes.finish(step, self.clock() if self.clock is not None else None)
        self._one_cycles_judged(step)
        self.groups.finish()

    def adopt_cycles(self, optimizer: torch.optim.Optimizer) -> None:
        """The clock's first step: the OneCycleLRs built over it before any step, as they
        stand (a schedule built and never stepped stays at its start, max_lr / 25)."""
        for ref in self.unclocked:
            scheduler = ref()
            if scheduler is not None and scheduler.optimizer is optimizer:
                self.one_cycles.setdefault(id(scheduler), _cycle(scheduler, scheduler.last_epoch))
        self.unclocked.clear()

    def _one_cycles_judged(self, step: int) -> None:
        """The clock's run ended at ``step`` (the script's end, or another clock): its
        OneCycleLR schedules against the optimiser steps it took (``lr-schedule-stalled``)."""
        for name, total, steps, lr, peak in self.one_cycles.values():
            found = slips.lr_schedule_stalled(name, total, steps, step - self.first + 1, lr, peak)
            self.report(found, at_step=False)
        self.one_cycles.clear()


LOWER_WORDS = re.compile(
    r"loss|mse|nll|cross_entropy|rmse|mae|error|err\b|perplexity|ppl|cost|distance", re.I
)
"""Words in a metric's name or the line that makes it that say lower is better."""
HIGHER_WORDS = re.compile(
    r"acc|argmax|==|f1|auc|score|bleu|rouge|reward|return|iou|precision|recall|correct|map\b",
    re.I,
)
"""And those that say higher is better."""


def metric_kind(frame: FrameType | None) -> str:
    """What the script's ``scheduler.step(metric)`` at ``frame`` gives, by its words and those
    of the line that last assigns it (within 40 lines above; ``va`` and ``vl`` read as a
    validation accuracy and loss): "lower" (a loss, an error), "higher" (an accuracy, a
    score), or "" (neither, or both). ``-metric`` and ``1 - metric`` turn it round."""
    if frame is None:
        return ""
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    call = line.find(".step(")
    if call < 0:
        return ""
    given, depth = "", 1  # up to the call's own closing parenthesis
    for char in line[call + len(".step(") :]:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            break
        given += char
    given = given.strip()
    words = given
    name = re.fullmatch(r"-?\s*(?:1\s*-\s*)?(\w+)(?:\.item\(\))?", given)
    if name is not None:
        assigned = re.compile(rf"^\s*(?:[\w\s,]*,\s*)?{name.group(1)}\s*(?:,[\w\s,]*)?=(?!=)(.*)")
        for back in range(frame.f_lineno - 1, max(0, frame.f_lineno - 40), -1):
            found = assigned.match(linecache.getline(frame.f_code.co_filename, back))
            if found is not None:
                words += " " + found.group(1)
                break
    if name is not None and re.fullmatch(r"[vt](al)?_?[al]", name.group(1)):
        words += " acc" if name.group(1)[-1] == "a" else " loss"  # va, val_a; vl, tl
    lower, higher = LOWER_WORDS.search(words), HIGHER_WORDS.search(words)
    if bool(lower) == bool(higher):
        return ""
    kind = "lower" if lower else "higher"
    if re.match(r"-|1\s*-", given):
        kind = "higher" if kind == "lower" else "lower"
    return kind


def _returns_rate(
    scheduler: LambdaLR, group: int, base: float, peak: float, step: int, near: bool
) -> Finding:
    """``lr-lambda-returns-rate`` at the lambda's line (its scheduler's where it has none)."""
    function = scheduler.lr_lambdas[group]
    code = getattr(getattr(function, "func", function), "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    like = (
        f"about the optimiser's own lr ({base:.3g})"
        if near
        else f"and no longer rising, over an optimiser given lr={base:.3g}"
    )
    return Finding(
        "lr-lambda-returns-rate",
        "warning",
        f"LambdaLR's lr_lambda gave factors of at most {peak:.3g} in {step + 1} steps, {like}: "
        "it returns a learning rate, but LambdaLR multiplies the optimiser's lr by what it "
        f"returns, so the run trains at their product, at most {base * peak:.3g}",
        where=where or sites.user_site(3),
        evidence={"base_lr": base, "largest_factor": peak, "steps": step + 1},
    )


_CUT: list[float] = []
"""A ReduceLROnPlateau's values once it has cut (it is judged at its first cut only)."""


def _cycle(scheduler: OneCycleLR, steps: int) -> tuple[str, int, int, float, float]:
    """A OneCycleLR's record for ``lr-schedule-stalled``: its name, total_steps, ``steps``
    taken, and its optimiser's lr now and the schedule's peak."""
    group = scheduler.optimizer.param_groups[0]
    lr = float(group["lr"])
    name, total = type(scheduler).__name__, int(scheduler.total_steps)
    return name, total, steps, lr, float(group.get("max_lr", lr))
