"""``eval-inputs-off-scale``: an evaluation whose inputs are on another scale than the
training inputs of the same model: a validation set left without the ``Normalize`` (or the
division by 255, or the fitted scaler) that the training set has, or given one the training
set lacks. Nothing fails: the model scores inputs unlike any it trained on, and the score is
no measure of it.

A trained model's forwards are read for their first floating tensor of two dims or more (its
arguments, and those in a dict, list or tuple among them): on sampled training steps (gradients
on, training mode) and at every forward of an evaluation (any other of its forwards, up to
``FORWARDS`` of one), the root mean square of its values and the share of them below 0, on the
device. An evaluation is judged at the next training forward (or when the run ends), in one
host read: the tensor in the same place with the same size past the batch dim, ``TRAINED`` or
more training readings and ``EVALUATED`` or more of the evaluation's, each side's root mean
squares within ``STEADY`` of one another (a diffusion model's sampler runs from pure noise to
an image, whose scale changes by far more). Off scale: the medians ``APART`` or more apart;
or ``SIGNED`` apart with values below 0 on one side only (a share of ``NEGATIVE`` or more of
them on every reading of that side, none at all on the other): images normalised by their
channels' means for training, left in [0, 1] for validation.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import checks, sites
from treeqa.health.findings import Finding
from treeqa.health.heldout import given

TRAINED, EVALUATED = 3, 2
"""The fewest sampled training readings, and forwards of the evaluation, for a judgement."""
FORWARDS = 64
"""Forwards of one evaluation read, at most."""
KEPT = 16
"""The latest training readings kept."""
STEADY = 4.0
"""The most one side's root mean squares may differ, largest over smallest, to be judged."""
APART = 10.0
"""Medians of root mean square this far apart (either way): off scale whatever the signs."""
SIGNED = 1.5
"""Medians this far apart, with values below 0 on one side only: off scale."""
NEGATIVE = 0.1
"""The share of values below 0 a side has on every reading to count as signed."""

Key = tuple[int, tuple[int, ...]]
"""Where the read tensor was among the forward's tensors, and its size past the batch dim."""


class InputScales:
    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.key: Key | None = None  # of the training readings
        self.trained: list[torch.Tensor] = []  # [2] (rms, share below 0) each, on the device
        self.evaluated: list[torch.Tensor] = []  # the evaluation's since the last training one
        self.where = ""  # the line of the evaluation's first forward read
        self.said = False

    def forward(
        self, args: tuple[Any, ...], kwargs: dict[str, Any] | None, training: bool, step: int
    ) -> None:
        """A trained model's forward: a sampled training one (``training``) or an
        evaluation's (any other); ``step``: the clock's."""
        if self.said:
            return
        if training and self.evaluated:
            self.judge(step)
        if not training and (self.key is None or len(self.evaluated) >= FORWARDS):
            return
        read = _read(args, kwargs)
        if read is None:
            return
        key, reading = read
        if training:
            if key != self.key:
                self.key, self.trained = key, []
            self.trained = [*self.trained[-(KEPT - 1) :], reading]
        elif key == self.key:
            if not self.evaluated:
                self.where = sites.user_site()
            self.evaluated.append(reading)

    def judge(self, step: int) -> None:
        """The evaluation after ``step`` against the training readings before it."""
        evaluated, self.evaluated = self.evaluated, []
        if self.said or len(evaluated) < EVALUATED or len(self.trained) < TRAINED:
            return
        values = torch.stack([r.float().cpu() for r in (*self.trained, *evaluated)]).tolist()
        trained, scored = values[: len(self.trained)], values[len(self.trained) :]
        found = _off_scale(trained, scored)
        if found is not None:
            self.said = True
            found.evidence["after_step"] = step
            found.where = self.where
            self.add(found)


def _read(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> tuple[Key, torch.Tensor] | None:
    """The forward's first floating tensor of two dims or more: its key and [2] reading."""
    for at, x in enumerate(given(args, kwargs)):
        if x.is_floating_point() and x.dim() >= 2 and x.numel() and not checks.untraceable(x):
            with torch.no_grad():
                v = x.detach().float()
                reading = torch.stack([v.square().mean().sqrt(), (v < 0).float().mean()])
            return (at, tuple(x.shape[1:])), reading
    return None


def _off_scale(trained: list[list[float]], scored: list[list[float]]) -> Finding | None:
    """The finding where the evaluation's readings ``scored`` are off the training ones'
    scale; each reading (root mean square, share below 0)."""
    t_rms, e_rms = [r for r, _ in trained], [r for r, _ in scored]
    if min(t_rms) <= 0 or min(e_rms) <= 0:
        return None
    if max(t_rms) > STEADY * min(t_rms) or max(e_rms) > STEADY * min(e_rms):
        return None
    t_mid, e_mid = statistics.median(t_rms), statistics.median(e_rms)
    ratio = max(e_mid / t_mid, t_mid / e_mid)
    t_neg, e_neg = [n for _, n in trained], [n for _, n in scored]
    signed = (min(t_neg) >= NEGATIVE and max(e_neg) == 0) or (
        max(t_neg) == 0 and min(e_neg) >= NEGATIVE
    )
    if ratio < APART and not (signed and ratio >= SIGNED):
        return None
    t_below, e_below = statistics.median(t_neg), statistics.median(e_neg)
    return eval_inputs_off_scale(t_mid, e_mid, t_below, e_below, len(trained), len(scored))


def eval_inputs_off_scale(
    t_rms: float, e_rms: float, t_neg: float, e_neg: float, trained: int, scored: int
) -> Finding:
    """An evaluation's inputs (root mean square ``e_rms``, share below 0 ``e_neg``, over
    ``scored`` forwards) against the training inputs' (over ``trained`` sampled steps)."""
    times = e_rms / t_rms
    said = f"{times:.3g}x larger" if times >= 1 else f"{1 / times:.3g}x smaller"
    return Finding(
        "eval-inputs-off-scale",
        "warning",
        f"an evaluation gave the model inputs on another scale than its training inputs: root "
        f"mean square {e_rms:.3g} over {scored} forwards against {t_rms:.3g} over {trained} "
        f"sampled training steps ({said}), {e_neg:.0%} of the values below 0 against "
        f"{t_neg:.0%}: the evaluation data was not scaled or normalised as the training data "
        "was (a validation transform without Normalize or ToTensor's division by 255, a scaler "
        "fitted on the training set and not applied to the test set), so its score says "
        "little of the model",
        evidence={
            "train_rms": round(t_rms, 6),
            "eval_rms": round(e_rms, 6),
            "train_negative": round(t_neg, 4),
            "eval_negative": round(e_neg, 4),
            "train_readings": trained,
            "eval_forwards": scored,
        },
    )
