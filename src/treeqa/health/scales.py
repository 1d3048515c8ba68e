"""``eval-inputs-off-scale``: an evaluation whose inputs are on another scale than the
training inputs of the same model: a validation set left without the ``Normalize`` (or the
division by 255, or the fitted scaler) that the training set has, or given one the training
set lacks. Nothing fails: the model scores inputs unlike any it trained on, and the score is
no measure of it.

A trained model's forwards are read for their first floating tensor of two dims or more (its
arguments, and those in a dict, list or tuple among them): on sampled training steps (gradients
on, training mode) and at every forward of an evaluation (any other of its forwards, up to
``FORWARDS`` of one), its values' root mean square, share below 0 and mean, on the device. An
evaluation (its forwards after one step of the clock) is judged at the next sampled training
forward, the next evaluation's first forward, or when the run ends, in one host read: the
tensor in the same place with the same size past the batch dim, ``TRAINED`` or more training
readings and ``EVALUATED`` or more of the evaluation's, each side's root mean squares within
``STEADY`` of one another (a diffusion model's sampler runs from pure noise to an image, whose
scale changes by far more). Off scale: the medians ``APART`` or more apart; or one side
centred on 0 (``_centred``), images in [0, 1] on the other (``_unit_images``), and their
means ``SHIFT`` apart: images normalised by their channels' means for training, left in
[0, 1] for validation. Forwards of one row are not read.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

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
APART = 50.0
"""Medians of root mean square this far apart (either way): off scale whatever the signs
(bytes against [0, 1]: ~250x; raw tabular features against standardised ones: 100x and far
more). Subsets legitimately far from a training batch's scale, dominated by its largest rows,
stood 11-47x from it: the quiet or dark ones of a gain or brightness augmentation, short
documents as raw counts, a truncated GAN's latents, fault windows for an anomaly detector, an
activation maximisation's small start; the first version, at 10x, flagged them."""
NEGATIVE, CENTRED = 0.1, 0.5
"""A side is centred where every reading has this share of its values below 0 or more, and
their mean within this share of their root mean square of 0 (images normalised by another
set's statistics, ImageNet's, stand up to a third of it away)."""
SHIFT = 0.25
"""Medians of the mean this far apart (times the smaller root mean square), one side centred
on 0 and the other images in [0, 1] (``_unit_images``): off scale, however near their root
mean squares (images scaled to [-1, 1] for training and left in [0, 1] for validation: about
as large). Noise added to training images alone leaves their mean where it was."""

Key = tuple[int, tuple[int, ...]]
"""Where the read tensor was among the forward's tensors, and its size past the batch dim."""


class InputScales:
    """Each trained model's readings on its own (``Readings``); one finding in a run."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.models: dict[int, Readings] = {}
        self.said = False

    def forward(
        self,
        model: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        training: bool,
        step: int,
    ) -> None:
        """A trained model's forward: a sampled training one (``training``) or an
        evaluation's (any other); ``step``: the clock's."""
        if self.said or torch.jit.is_tracing():  # (values read in a trace are its constants)
            return
        readings = self.models.setdefault(id(model), Readings())
        if readings.evaluated and (training or step != readings.eval_step):
            self._judge(readings, step)  # (a forward of another step's evaluation ends it)
        if not training and (readings.key is None or len(readings.evaluated) >= FORWARDS):
            return
        read = _read(args, kwargs)
        if read is not None:
            readings.add(*read, training, step)

    def judge(self, step: int) -> None:
        """The run ended at ``step``: every evaluation not judged yet."""
        for readings in self.models.values():
            self._judge(readings, step)

    def _judge(self, readings: Readings, step: int) -> None:
        """The evaluation after ``step`` against the training readings before it."""
        evaluated, readings.evaluated = readings.evaluated, []
        trained = readings.trained
        if self.said or len(evaluated) < EVALUATED or len(trained) < TRAINED:
            return
        device = trained[0].device  # (an evaluation's inputs may sit elsewhere)
        values = torch.stack([r.to(device) for r in (*trained, *evaluated)]).tolist()  # one read
        found = None
        for scored in _apart(values[len(trained) :]):
            found = found or _off_scale(values[: len(trained)], scored)
        if found is not None:
            self.said = True
            found.evidence["after_step"] = step
            found.where = readings.where
            self.add(found)


class Readings:
    """One model's: its latest training readings and its evaluation's since, each [4] (root
    mean square, share below 0, mean, whether images in [0, 1]) on the device."""

    def __init__(self) -> None:
        self.key: Key | None = None  # of the training readings
        self.trained: list[torch.Tensor] = []
        self.evaluated: list[torch.Tensor] = []  # the evaluation's since the last training one
        self.where = ""  # the line of the evaluation's first forward read
        self.eval_step = 0  # the clock's step it came after

    def add(self, key: Key, reading: torch.Tensor, training: bool, step: int) -> None:
        if training:
            if key != self.key:
                self.key, self.trained = key, []
            self.trained = [*self.trained[-(KEPT - 1) :], reading]
        elif key == self.key:
            if not self.evaluated:
                self.where, self.eval_step = sites.user_site(), step
            self.evaluated.append(reading)


def _read(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> tuple[Key, torch.Tensor] | None:
    """The forward's first floating tensor of two dims or more: its key and [4] reading."""
    for at, x in enumerate(given(args, kwargs)):
        if x.is_floating_point() and x.dim() >= 2 and x.numel() and not checks.untraceable(x):
            if x.shape[0] < 2:  # one row's scale is no batch's (a deployment's single inputs)
                return None
            with torch.no_grad():
                v = x.detach().float()
                rms, below = v.square().mean().sqrt(), (v < 0).float().mean()
                unit = float(x.dim() >= 4) * (v.amin() >= 0) * (v.amax() <= 1)
                reading = torch.stack([rms, below, v.mean(), unit])
            return (at, tuple(x.shape[1:])), reading
    return None


def _off_scale(trained: list[list[float]], scored: list[list[float]]) -> Finding | None:
    """The finding where the evaluation's readings ``scored`` are off the training ones'
    scale; each reading (root mean square, share below 0, mean, whether images in [0, 1])."""
    t_rms, e_rms = [r[0] for r in trained], [r[0] for r in scored]
    if min(t_rms) <= 0 or min(e_rms) <= 0:
        return None
    if max(t_rms) > STEADY * min(t_rms) or max(e_rms) > STEADY * min(e_rms):
        return None
    t_mid, e_mid = statistics.median(t_rms), statistics.median(e_rms)
    ratio = max(e_mid / t_mid, t_mid / e_mid)
    signed = (
        _centred(trained) and _unit_images(scored) or _unit_images(trained) and _centred(scored)
    )
    t_mean = statistics.median(r[2] for r in trained)
    e_mean = statistics.median(r[2] for r in scored)
    moved = abs(t_mean - e_mean) >= SHIFT * min(t_mid, e_mid)
    if ratio < APART and not (signed and moved):
        return None
    t_below = statistics.median(r[1] for r in trained)
    e_below = statistics.median(r[1] for r in scored)
    return eval_inputs_off_scale(t_mid, e_mid, t_below, e_below, len(trained), len(scored))


def _apart(scored: list[list[float]]) -> list[list[list[float]]]:
    """An evaluation's readings cut where one's root mean square is ``APART`` from the one
    before (a validation set and a test set scored by one function after the last step, the
    test set left in bytes: 1.0 then 757), each part of ``EVALUATED`` readings or more."""
    parts = [scored[:1]]
    for before, now in zip(scored, scored[1:], strict=False):
        if max(now[0], before[0]) >= APART * max(min(now[0], before[0]), 1e-12):
            parts.append([])
        parts[-1].append(now)
    return [part for part in parts if len(part) >= EVALUATED]


def _centred(readings: list[list[float]]) -> bool:
    """Values below 0 on every reading (``NEGATIVE`` of them or more), their mean near 0
    (within ``CENTRED`` of their root mean square): data normalised by its mean. (Noise added
    to images in [0, 1] puts values below 0 too; where the images' mean is small, MNIST's
    0.13, it is centred as well, and ``SHIFT`` tells them apart.)"""
    return all(below >= NEGATIVE and abs(mean) <= CENTRED * rms for rms, below, mean, _ in readings)


def _unit_images(readings: list[list[float]]) -> bool:
    """Images (four dims or more: ``[B, C, H, W]``) with every value in [0, 1] on every
    reading: ToTensor's, without Normalize. (Features of two dims that are all above 0 are
    as often a subset above the training mean, a later period of a trending series, a
    quadrant of a coordinate network's domain, as features left unscaled: the first version,
    which asked no value below 0 of any tensor, flagged 6 such clean scripts.)"""
    return all(unit == 1 for *_, unit in readings)


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
