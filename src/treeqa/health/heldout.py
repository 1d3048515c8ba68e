"""Evaluation rows the same weights trained on before their optimiser was made anew
(``evaluation-data-trained-on``): a k-fold loop that reuses one model across folds, each fold's
validation rows scored after earlier folds trained on them.

A run is cut into phases where a new optimiser over the clock's parameters takes over
(``optimizer = Adam(model.parameters())`` at each fold). The rows of each sampled training step's
input (the first tensor a trained model is given, with gradients on) are fingerprinted: an
integer hash of each row's bits (up to ``ELEMENTS`` of them, evenly spaced), exact whatever the
batch; the rows of every evaluation forward (the same model under ``no_grad``, in either mode)
too. Fingerprints stay on the device until an evaluation is judged (one host read then).

Whether the weights went on from one phase to the next or were reset (re-initialised, loaded
from a copy) is read off a parameter's version counter, which every in-place change bumps:
the optimiser's steps bump it by the same count each step, so the new optimiser's first step
finds it where steps alone would have put it, or not (a reset, a load, or anything else done to
the weights in place, which ends the earlier phases' rows: nothing is judged against them).

An evaluation is judged at the next training forward, each of its forwards apart: ``MATCHED``
or more of a forward's rows, and a tenth of them, among the rows earlier phases of the same weights trained on, and none
among those of the phase now, where at least ``MATCHED`` would be expected were its rows
trained on now as well (by the two phases' shares of sampled rows). A score of the training
data (its rows among the phase's own) and a validation set never trained on pass.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import checks
from treeqa.health.findings import Finding

ELEMENTS = 4096
"""The most elements of a row its fingerprint reads (evenly spaced)."""
MATCHED = 5
"""Evaluation rows matched in earlier phases, and expected in this one, for the finding."""
KEPT = 50_000
"""The most fingerprints a phase keeps (augmented data makes every row new)."""
EVALUATED_BATCHES = 64
"""The most forwards of one evaluation fingerprinted."""
READ_EVERY = 32
"""Sampled steps' fingerprints held on the device before they are read."""


class HeldOut:
    """``add``: where the finding goes."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.now: set[int] = set()  # rows this phase trained on (sampled steps)
        self.before: set[int] = set()  # rows earlier phases of the same weights trained on
        self.trained: list[torch.Tensor] = []  # fingerprints still on the device
        self.evaluated: list[torch.Tensor] = []  # this evaluation's, until judged
        # (step, version) of the clock's first parameter after the last two sampled steps
        self.versions: list[tuple[int, int]] = []
        self.parameter: weakref.ref[torch.Tensor] | None = None  # the one they are of
        self.phase_step = 0  # the step at which this phase began
        self.said = False
        self._weights: dict[torch.device, torch.Tensor] = {}

    def reset(self) -> None:
        """Another model trains from now on: nothing before counts."""
        self.now, self.before, self.versions = set(), set(), []
        self.trained, self.evaluated = [], []

    def forward(
        self, args: tuple[Any, ...], kwargs: dict[str, Any] | None, sampled: bool, step: int
    ) -> None:
        """A trained model's forward at ``step``: with gradients on, a training one (its rows
        read on a sampled step; the evaluation before it judged), else an evaluation's."""
        if self.said:
            return
        training = torch.is_grad_enabled()
        if training and self.evaluated:
            self.judge(step)
        if training:
            # (read now and then: a run without evaluations would keep them all)
            if not sampled or len(self.now) >= KEPT:
                return
            if len(self.trained) >= READ_EVERY:
                self._read_trained()
        elif not self.before or len(self.evaluated) >= EVALUATED_BATCHES:
            return  # (nothing to judge it against: no rows of an earlier phase)
        x = _first_tensor(args, kwargs)
        if x is None or x.dim() < 1 or x.shape[0] < 1 or not checks.dense(x):
            return
        if not checks.untraceable(x):
            (self.trained if training else self.evaluated).append(self._fingerprints(x))

    def stepped(self, step: int, optimizer: torch.optim.Optimizer) -> None:
        """The clock's sampled ``step`` ended: the version of its first parameter."""
        parameter = next((p for g in optimizer.param_groups for p in g["params"]), None)
        if not isinstance(parameter, torch.Tensor):
            return
        if self.parameter is None or self.parameter() is not parameter:
            self.parameter, self.versions = weakref.ref(parameter), []
        self.versions = [*self.versions[-1:], (step, parameter._version)]

    def new_optimiser(self, steps: int) -> None:
        """A new optimiser over the clock's parameters took its first step, the run's step
        ``steps + 1``: a phase ends. It went on from the weights the last one left if the
        version of the parameter read at the clock's sampled steps is where one more step of
        the same count per step would put it."""
        self.judge(steps)
        parameter = self.parameter() if self.parameter is not None else None
        if parameter is not None and self._went_on(steps + 1, parameter._version):
            self.before |= self.now
        else:
            self.before = set()
        self.now, self.versions, self.phase_step = set(), [], steps + 1

    def judge(self, step: int) -> None:
        """The evaluation forwards since the last training one (the run ended after them, or a
        phase ends), each forward's rows on their own: an evaluation of a fold's validation
        rows is often followed by one of the next fold's before it trains."""
        evaluated, self.evaluated = self.evaluated, []
        self._read_trained()
        if self.said or not self.before:
            return
        for fingerprints in evaluated:
            rows = fingerprints.cpu().tolist()
            before = sum(1 for r in rows if r in self.before)
            now = sum(1 for r in rows if r in self.now)
            expected = before * len(self.now) / len(self.before)
            if before >= max(MATCHED, 0.1 * len(rows)) and now == 0 and expected >= MATCHED:
                self.said = True
                self.add(evaluation_data_trained_on(before, len(rows), self.phase_step, step))
                return

    def _went_on(self, step: int, version: int) -> bool:
        if len(self.versions) < 2:
            return False
        (s1, v1), (s2, v2) = self.versions
        per_step, rest = divmod(v2 - v1, s2 - s1)
        return rest == 0 and version == v2 + per_step * (step - s2)

    def _read_trained(self) -> None:
        if self.trained:
            rows = torch.cat([f.cpu() for f in self.trained]).tolist()
            self.trained = []
            self.now.update(rows)

    def _fingerprints(self, x: torch.Tensor) -> torch.Tensor:
        """[B] int64: a hash of each row's bits (exact: integer sums wrap around)."""
        rows = x.detach().reshape(x.shape[0], -1)
        rows = rows[:, :: max(1, rows.shape[1] // ELEMENTS)]
        bits = _as_integers(rows)
        weights = self._weights.get(x.device)
        if weights is None or weights.numel() < bits.shape[1]:
            made = torch.Generator().manual_seed(0)
            odd = torch.randint(1, 2**62, (max(bits.shape[1], ELEMENTS + 1),), generator=made)
            weights = self._weights[x.device] = (odd | 1).to(x.device)
        return (bits * weights[: bits.shape[1]]).sum(1)


def _as_integers(rows: torch.Tensor) -> torch.Tensor:
    """The bits of each value, as int64."""
    if rows.is_complex():
        rows = torch.view_as_real(rows).flatten(1)
    if rows.is_floating_point():
        signed = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}
        rows = rows.contiguous().view(signed[rows.element_size()])
    return rows.to(torch.int64)


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> torch.Tensor | None:
    """The first tensor a forward is given: an argument, or the first in a dict, list or tuple
    among its arguments (``model(**batch)``, ``model(batch)``)."""
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, dict):
            value = next(iter(value.values()), None)
        elif isinstance(value, list | tuple):
            value = value[0] if value else None
        if isinstance(value, torch.Tensor):
            return value
    return None


def evaluation_data_trained_on(matched: int, rows: int, phase: int, step: int) -> Finding:
    """``matched`` of an evaluation's ``rows`` (after ``step``) were trained on before the
    optimiser made anew at step ``phase``, by the same weights, and none since."""
    return Finding(
        "evaluation-data-trained-on",
        "warning",
        f"an evaluation after step {step} scored rows the same weights had trained on: "
        f"{matched} of its {rows} rows were among the sampled training rows of the steps "
        f"before step {phase}, where a new optimiser took over without the weights being "
        "reset, and none among those since; a score of them is no held-out score (a k-fold "
        "loop that reuses one model: each fold's validation rows were trained on by the folds "
        "before it)",
        evidence={"matched_rows": matched, "rows": rows, "phase_began": phase},
    )
