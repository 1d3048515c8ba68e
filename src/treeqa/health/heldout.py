"""Evaluation rows the same weights trained on before their optimiser was made anew
(``evaluation-data-trained-on``): a k-fold loop that reuses one model across folds, each fold's
validation rows scored after earlier folds trained on them.

A run is cut into phases where a new optimiser over the clock's parameters takes over
(``optimizer = Adam(model.parameters())`` at each fold). A trained model's forward with
gradients on, in training mode, is a training one; any other of its forwards (under
``no_grad``, or in eval mode) an evaluation's. The rows of each sampled training forward's
inputs, and of every evaluation forward's, are fingerprinted: an integer hash of each row's bits
(up to ``ELEMENTS`` of each tensor's, evenly spaced) over every tensor it is given with the
batch's first dim, exact whatever the batch; ids alone (one integer a row: a user, a timestep)
are no rows of data and are left out. Fingerprints stay on the device until read.

Whether the weights went on from one phase to the next or were reset is read off the first
parameter with a gradient at the clock's sampled steps. Its version counter, which every
in-place change bumps by one, rises by the same count each step: a reset through autograd
(``reset_parameters()``, ``load_state_dict``) leaves it off that count. One through ``.data``
(``p.data.copy_(p0)``, ``vector_to_parameters``, ``m.weight.data.normal_()``) does not, so its
values are read too: the new optimiser's first step finds them near those of the phase's last
sampled step (within ``NEARER`` of their distance from its first) if the weights went on, and
near its first sampled step's or somewhere new if they were reset. Anything else ends the
earlier phases' rows: nothing is judged against them.

An evaluation is judged at the next training forward, each of its forwards apart (a fold's last
evaluation is often followed by the next fold's first, before it trains; forwards of fewer than
``MATCHED`` rows, a row at a time, are pooled): ``MATCHED`` or more of its rows, and a tenth,
among the rows earlier phases of the same weights trained on, read on ``STEPS`` sampled steps or
more, and none among the phase's own, where at least ``MATCHED`` would be expected were its rows
trained on now as well (by the two phases' counts of sampled rows). And the phases must have
trained on common rows (``MATCHED`` or more): folds share most of their data, while a second
task after a first (continual learning) or fine-tuning on labelled rows after pretraining on
others share none, and their scores of the earlier rows are no k-fold's.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import checks
from treeqa.health.findings import Finding

ELEMENTS = 4096
"""The most elements of a row's tensor its fingerprint reads (evenly spaced)."""
MATCHED = 5
"""Evaluation rows matched in earlier phases, expected in this one, and rows the phases share."""
STEPS = 3
"""Sampled steps the matched rows were read on, at least (one batch scored as it trained: a
loader that does not shuffle, whose sampled steps fall on other batches in each phase)."""
NEARER = 0.6
"""How much nearer the weights must be to the last sampled step's than to the first's."""
VALUES = 256
"""Elements of the parameter whose values are read."""
KEPT = 50_000
"""The most fingerprints a phase keeps, and earlier phases together (augmented data makes
every row new)."""
EVALUATED_BATCHES = 64
"""The most forwards of one evaluation fingerprinted."""
READ_EVERY = 32
"""Sampled steps' fingerprints held on the device before they are read."""

Record = tuple[int, int, torch.Tensor]
"""(step, version, values) of the watched parameter after a sampled step."""


class HeldOut:
    """``add``: where the finding goes."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.now: dict[int, int] = {}  # rows this phase trained on -> the sampled step read at
        self.before: dict[int, int] = {}  # rows earlier phases of the same weights trained on
        self.trained: list[tuple[int, torch.Tensor]] = []  # (step, fingerprints) on the device
        self.evaluated: list[torch.Tensor] = []  # this evaluation's, until judged
        self.parameter: weakref.ref[torch.Tensor] | None = None  # the one read at sampled steps
        self.first: Record | None = None  # after this phase's first sampled step
        self.last: list[Record] = []  # after its last two
        self.phase_step = 0  # the step at which this phase began
        self.said = False

    def reset(self) -> None:
        """Another model trains from now on: nothing before counts."""
        self.now, self.before, self.trained, self.evaluated = {}, {}, [], []
        self.parameter, self.first, self.last = None, None, []

    def forward(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        training: bool,
        sampled: bool,
        step: int,
    ) -> None:
        """A trained model's forward at ``step``: a training one (``training``: gradients on,
        training mode; its rows read on a sampled step, the evaluation before it judged), else
        an evaluation's."""
        if self.said:
            return
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
        fingerprints = self._fingerprints(args, kwargs)
        if fingerprints is None:
            return
        if training:
            self.trained.append((step, fingerprints))
        else:
            self.evaluated.append(fingerprints)

    def stepped(self, step: int, optimizer: torch.optim.Optimizer) -> None:
        """The clock's sampled ``step`` ended: the version and first values of its first
        parameter with a gradient."""
        groups = optimizer.param_groups
        parameter = next((p for g in groups for p in g["params"] if p.grad is not None), None)
        if not isinstance(parameter, torch.Tensor):
            return
        if self.parameter is None or self.parameter() is not parameter:
            self.parameter, self.first, self.last = weakref.ref(parameter), None, []
        record = (step, parameter._version, _values(parameter))
        self.first = self.first or record
        self.last = [*self.last[-1:], record]

    def new_optimiser(self, steps: int) -> None:
        """A new optimiser over the clock's parameters took its first step, the run's step
        ``steps + 1``: a phase ends, its rows kept where the weights went on."""
        self.judge(steps)
        # (the rows of the step just taken, read before it was known to be the new one's)
        ours = {row: at for row, at in self.now.items() if at == steps}
        parameter = self.parameter() if self.parameter is not None else None
        if parameter is not None and self._went_on(steps + 1, parameter):
            if len(self.before) < KEPT:  # (augmented data: every epoch's rows new)
                self.before.update((row, at) for row, at in self.now.items() if at != steps)
        else:
            self.before = {}
        self.now, self.first, self.last, self.phase_step = ours, None, [], steps + 1

    def judge(self, step: int) -> None:
        """The evaluation forwards since the last training one (the run ended after them, or a
        phase ends): each forward's rows on their own, forwards of fewer than ``MATCHED`` rows
        pooled."""
        evaluated, self.evaluated = self.evaluated, []
        self._read_trained()
        if self.said or not self.before:
            return
        shared = sum(1 for row in self.now if row in self.before)
        if shared < MATCHED:  # (the phases trained on other data)
            return
        forwards = [f.cpu().tolist() for f in evaluated]
        small = [row for rows in forwards if len(rows) < MATCHED for row in rows]
        for rows in [r for r in forwards if len(r) >= MATCHED] + [small]:
            steps = [self.before[r] for r in rows if r in self.before]
            now = sum(1 for r in rows if r in self.now)
            expected = len(steps) * len(self.now) / len(self.before)
            if (
                len(steps) >= max(MATCHED, 0.1 * len(rows))
                and len(set(steps)) >= STEPS
                and now == 0
                and expected >= MATCHED
            ):
                self.said = True
                self.add(evaluation_data_trained_on(len(steps), len(rows), self.phase_step, step))
                return

    def _went_on(self, step: int, parameter: torch.Tensor) -> bool:
        """The weights at ``step`` went on from the phase's: their version where steps alone
        put it, their values nearer the last sampled step's than its first's."""
        if len(self.last) < 2 or self.first is None or self.first[0] >= self.last[-1][0]:
            return False
        (s1, v1, _), (s2, v2, values) = self.last
        per_step, rest = divmod(v2 - v1, s2 - s1)
        if rest or parameter._version != v2 + per_step * (step - s2):
            return False
        now = _values(parameter)
        to_last = float((now - values).norm())
        return to_last <= NEARER * float((now - self.first[2]).norm())

    def _read_trained(self) -> None:
        if self.trained:
            for step, fingerprints in self.trained:
                self.now.update(dict.fromkeys(fingerprints.cpu().tolist(), step))
            self.trained = []

    def _fingerprints(
        self, args: tuple[Any, ...], kwargs: dict[str, Any] | None
    ) -> torch.Tensor | None:
        """[B] int64: a hash of each row over the tensors of the forward's batch (exact:
        integer sums wrap around); None where it is given no rows of data."""
        tensors = given(args, kwargs)
        if not tensors:
            return None
        batch = tensors[0].shape[0]
        hashed = None
        for x in tensors:
            if x.shape[0] != batch or checks.untraceable(x):
                continue
            rows = x.detach().reshape(batch, -1)
            if rows.shape[1] <= 1 and not rows.is_floating_point():
                continue  # ids: a user, an item, a timestep
            h = row_hashes(rows)
            hashed = h if hashed is None else hashed * 1_000_003 + h
        return hashed


def row_hashes(rows: torch.Tensor) -> torch.Tensor:
    """[R] int64: a hash of the bits of each row of ``rows`` ([R, C]; up to ``ELEMENTS`` of
    each, evenly spaced by a step prime to 2 and 3, so that channels interleaved by 2, 3, 4 or
    6, ``[T, 2]`` of a time and a value, are all read), exact: integer sums wrap around."""
    step = max(1, rows.shape[1] // ELEMENTS)
    while step > 1 and (step % 2 == 0 or step % 3 == 0):
        step += 1
    rows = rows[:, ::step]
    bits = _as_integers(rows)
    weights = _WEIGHTS.get(rows.device)
    if weights is None or weights.numel() < bits.shape[1]:
        made = torch.Generator().manual_seed(0)
        odd = torch.randint(1, 2**62, (max(bits.shape[1], ELEMENTS + 1),), generator=made)
        weights = _WEIGHTS[rows.device] = (odd | 1).to(rows.device)
    return (bits * weights[: bits.shape[1]]).sum(1)


_WEIGHTS: dict[torch.device, torch.Tensor] = {}
"""Odd multipliers of a row's values, by device, made once."""


def _values(parameter: torch.Tensor) -> torch.Tensor:
    """The parameter's first values, copied (on its device)."""
    return parameter.detach().reshape(-1)[:VALUES].float().clone()


def _as_integers(rows: torch.Tensor) -> torch.Tensor:
    """The bits of each value, as int64."""
    if rows.is_complex():
        rows = torch.view_as_real(rows).flatten(1)
    if rows.is_floating_point():
        signed = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}
        rows = rows.contiguous().view(signed[rows.element_size()])
    return rows.to(torch.int64)


def given(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> list[torch.Tensor]:
    """The dense tensors a forward is given with a batch dim: its arguments, and those in a
    dict, list or tuple among them (``model(**batch)``, ``model(batch)``)."""
    found = []
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, dict):
            items = list(value.values())
        else:
            items = list(value) if isinstance(value, list | tuple) else [value]
        found += [t for t in items if isinstance(t, torch.Tensor) and t.dim() >= 1]
    return [t for t in found if t.shape[0] >= 1 and checks.dense(t)]


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
