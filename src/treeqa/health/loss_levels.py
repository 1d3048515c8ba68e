"""The run-wide checks on the loss's level: above log(C) at the start, at chance all run long,
diverged, climbed. Plain functions over the sampled steps' losses; ``monitor.py`` decides when
to call them, ``priors.py`` gives the chance level of imbalanced classes."""

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from treeqa.health.findings import Finding
from treeqa.health.thinning import row


def loss_at_init(first_loss: float, num_classes: int) -> Finding | None:
    """The first cross-entropy is far above log(C): the output layer starts too confident."""
    expected = math.log(max(num_classes, 2))
    if not math.isfinite(first_loss) or first_loss <= expected + max(1.0, expected):
        return None
    return Finding(
        "loss-at-init",
        "warning",
        f"first loss {first_loss:.3f} is far above log({num_classes}) = {expected:.3f} expected at initialisation",
        evidence={
            "first_loss": round(first_loss, 4),
            "expected": round(expected, 4),
            "classes": num_classes,
        },
    )


CHANCE_STEPS, CHANCE_SAMPLES, CHANCE_BAND, CHANCE_FLOOR = 200, 4, 0.03, 0.9
"""``loss-at-chance``: a run of at least this many steps; this many sampled steps in its second
half whose loss is a mean cross-entropy, their median within this fraction of log(C); and no
sampled step's below this share of log(C)."""
CHANCE_ABOVE = 0.10
"""Where the classes are imbalanced, the median may stand this far above the level of
predictions at the labels' frequencies: a model that learnt only those chases each batch's mix
(3-6% above it in ``bug_loss_at_chance_imbalanced.py``), and a loss above it learns no more."""
CHANCE_WORSE = 1.0
"""Above the band, up to this far above log(C) over balanced classes (twice it;
``loss-diverged`` starts at 4x), a loss whose readings never went below the floor is worse than
uniform predictions all the second half: a model thrashed by a learning rate far too high (BERT under the
transformers ``Trainer`` at 0.3 read 1.16 log(4) there, between this check's band and
``loss-diverged``'s). Said as at or above chance."""


def sampled_cross_entropies(
    samples: Sequence[tuple[int, int, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    levels: Mapping[int, float] | None = None,
) -> list[tuple[int, int, float, float]]:
    """(step, C, loss, loss / chance) of the sampled steps whose loss is a mean cross-entropy
    over C classes (``samples``: step, C, the factor the step's loss is it times: 1/k under
    gradient accumulation over k), read from the run's series; chance is log(C), or the
    step's level in ``levels`` (imbalanced classes: ``loss_at_chance``)."""
    levels = levels or {}
    return [
        (s, c, value, value / levels.get(s, math.log(c)))
        for s, c, value in sampled_losses(samples, steps, losses)
    ]


def sampled_losses(
    samples: Sequence[tuple[int, Any, float]], steps: Sequence[float], losses: Sequence[float]
) -> list[tuple[int, Any, float]]:
    """(step, what, loss / factor) of each of ``samples`` (step, what, factor) whose step has a
    value in ``losses``, whose step ``steps`` names (a long run's series are thinned:
    ``thinning.py``)."""
    rows = ((s, what, k, row(steps, s)) for s, what, k in samples)
    return [(s, what, losses[at] / k) for s, what, k, at in rows if at is not None]


def typical_late_loss(
    steps: Sequence[float],
    losses: Sequence[float],
    middle: float,
    samples: Sequence[tuple[int, Any, float]] = (),
) -> float:
    """The median finite loss of every step in the run's second half, sampled or not (NaN
    when none): the sampled steps are every ``every``-th, and a loader read in the same order
    each epoch of as many batches puts the same batch on each of them, so their level alone
    may be one batch's. Divided by the median factor of the sampled steps there (``samples``:
    step, what, factor): the steps between are read as scaled as those."""
    late = [v for s, v in zip(steps, losses, strict=False) if s > middle and math.isfinite(v)]
    scales = [k for s, _, k in samples if s > middle]
    scale = statistics.median(scales) if scales else 1.0
    return statistics.median(late) / scale if late else math.nan


def loss_at_chance(
    samples: Sequence[tuple[int, int, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    levels: Mapping[int, float] | None = None,
) -> Finding | None:
    """The sampled steps' loss, a mean cross-entropy over C classes (``samples``: step, C,
    factor, as for ``sampled_cross_entropies``), stayed at chance through a run of
    ``CHANCE_STEPS`` or more: the median of its second half within ``CHANCE_BAND`` of it, not
    falling by more than that from the first half of those readings to the second, and none
    ever far below it. The model learns nothing from its inputs. Chance is log(C), the
    loss of predictions that ignore the input over balanced classes, or a step's level in
    ``levels`` where the classes are imbalanced: the loss of a model that learnt only how often
    each class comes, on that step's batch (``priors.py``). ``steps`` and ``losses``: the run's
    series (a batch's loss wanders around log(C): with 64 random labels, by ~3%)."""
    if not steps or steps[-1] < CHANCE_STEPS:
        return None
    read = sampled_cross_entropies(samples, steps, losses, levels)
    middle = (steps[0] + steps[-1]) / 2
    imbalanced = [value / r for s, _, value, r in read if s > middle and s in (levels or {})]
    classes = read[-1][1] if read else 2
    chance = statistics.median(imbalanced) if imbalanced else math.log(classes)
    # Balanced classes: anything above log(C) is worse than uniform predictions.
    above = CHANCE_ABOVE if imbalanced else CHANCE_WORSE
    ratios = [(s, r) for s, _, _, r in read]
    median = _stays_at(ratios, steps, losses, samples, chance, above)
    if median is None:
        return None
    worse = median - 1 > (CHANCE_ABOVE if imbalanced else CHANCE_BAND)
    values = [value for _, _, value, _ in read]
    against = f"log({classes}) = {chance:.3f} for predictions that ignore the input"
    if imbalanced:
        against = (
            f"{chance:.3f} (their median) for predictions that ignore the input and give each "
            f"class as often as the labels do (imbalanced classes; log({classes}) = "
            f"{math.log(classes):.3f})"
        )
    level = "at or above chance level" if worse else "at chance level"
    return Finding(
        "loss-at-chance",
        "warning",
        f"the loss stayed {level} all run: cross-entropy over {classes} classes read "
        f"{min(values):.3f}-{max(values):.3f} on {len(read)} sampled steps from step "
        f"{read[0][0]} to {read[-1][0]}"
        + (f" (their second half's median {median:.2f}x it)" if worse else "")
        + f", against {against}: the model learns nothing from its inputs"
        + (
            " (worse than ignoring them: a learning rate far too high?)"
            if worse
            else ", or the labels say little about them (labels drawn apart from their inputs, "
            f"or most of them wrong: with {wrong_labels_within(classes):.0%} of {classes} "
            f"classes' labels wrong at random the best loss is {0.98 * math.log(classes):.3f}, "
            "within this band)"
        ),
        evidence={
            "above_chance": worse,
            "classes": classes,
            "expected": round(chance, 4),
            "imbalanced": bool(imbalanced),
            "sampled_steps": len(read),
            "min": round(min(values), 4),
            "max": round(max(values), 4),
        },
    )


def wrong_labels_within(classes: int, level: float = 0.98) -> float:
    """The share of labels, wrong at random among the other ``classes - 1``, that puts the
    best loss a model can reach at ``level`` x log(C): the entropy of the labels given the true
    class, ``-(1 - w) log(1 - w) - w log(w / (C - 1))``, rises to log(C) at w = (C - 1) / C."""
    target, low, high = level * math.log(classes), 0.0, (classes - 1) / classes
    for _ in range(50):
        w = (low + high) / 2
        entropy = -(1 - w) * math.log(1 - w) - w * math.log(w / (classes - 1)) if w else 0.0
        low, high = (w, high) if entropy < target else (low, w)
    return (low + high) / 2


def _stays_at(
    ratios: Sequence[tuple[int, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    samples: Sequence[tuple[int, Any, float]],
    level: float,
    above: float,
    below: float = CHANCE_BAND,
    floor: float = CHANCE_FLOOR,
) -> float | None:
    """The median of the sampled steps' loss over its level (``ratios``: step, ratio) in the
    run's second half, where the loss stayed at that level: ``CHANCE_SAMPLES`` readings or more
    there, their median from ``below`` under the level to ``above`` over it, not falling by
    more than ``CHANCE_BAND`` from the first half of those readings to the second, none ever
    below ``floor``, and every step's loss there, sampled or not, not below the floor times
    ``level`` in its median (``steps``, ``losses``: the run's series; ``samples``: step, what,
    factor). None otherwise."""
    middle = (steps[0] + steps[-1]) / 2
    late = [r for s, r in ratios if s > middle]
    if len(late) < CHANCE_SAMPLES or not all(r >= floor for _, r in ratios):  # (NaN too)
        return None
    median = statistics.median(late)
    if not -below <= median - 1 <= above:
        return None
    half = len(late) // 2  # still falling onto it (from above): the model learns
    if statistics.median(late[:half]) - statistics.median(late[half:]) > CHANCE_BAND:
        return None
    if not typical_late_loss(steps, losses, middle, samples) >= floor * level:
        return None
    return median


MEAN_BELOW, MEAN_FLOOR = 0.05, 0.85
"""``loss-at-chance`` for a mean squared error: its second half's median may stand this far
below the level of predicting the targets' mean, and no reading below this share of it. A
network given the same wrongly paired rows every epoch memorises a little of them: 0.96 of the
level in a run of 8 epochs over 3,200 rows, a reading at 0.898 in another (a cross-entropy over
them stays nearer its level, whose predictions at chance are all alike)."""


def loss_at_mean(
    samples: Sequence[tuple[int, str, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    levels: Mapping[int, float],
) -> Finding | None:
    """The sampled steps' loss, a mean squared error (``samples``: step, function, factor, as
    for ``loss_climbed``), stayed at the level of predicting the targets' mean through a run of
    ``CHANCE_STEPS`` or more, as ``loss_at_chance`` judges a cross-entropy: the regression's
    chance. ``levels``: each step's, that error on its batch (``priors.TargetMoments``); up to
    ``CHANCE_ABOVE`` over it (a model whose outputs still wander about the mean) and
    ``MEAN_BELOW`` under it. Targets shuffled from their inputs, or inputs that hold nothing
    of them, train to there."""
    if not steps or steps[-1] < CHANCE_STEPS:
        return None
    read = [
        (s, value, levels[s])
        for s, function, value in sampled_losses(samples, steps, losses)
        if function == "mse_loss" and s in levels
    ]
    middle = (steps[0] + steps[-1]) / 2
    late = [v for s, _, v in read if s > middle]
    if not late:
        return None
    level = statistics.median(late)
    ratios = [(s, value / v) for s, value, v in read]
    median = _stays_at(ratios, steps, losses, samples, level, CHANCE_ABOVE, MEAN_BELOW, MEAN_FLOOR)
    if median is None:
        return None
    values = [value for _, value, _ in read]
    return Finding(
        "loss-at-chance",
        "warning",
        f"the loss stayed at the level of predicting the targets' mean all run: mse_loss "
        f"read {min(values):.4g}-{max(values):.4g} on {len(read)} sampled steps from step "
        f"{read[0][0]} to {read[-1][0]}, against each batch's squared error about the mean "
        f"of the training targets ({level:.4g} in the second half's median; the loss "
        f"{median:.2f}x it there): the model learns nothing, or next to nothing, from its "
        "inputs (targets shuffled from them?)",
        evidence={
            "function": "mse_loss",
            "expected": round(level, 6),
            "ratio": round(median, 4),
            "sampled_steps": len(read),
            "min": round(min(values), 6),
            "max": round(max(values), 6),
        },
    )


DIVERGED_RATIO, DIVERGED_FLOOR, DIVERGED_SAMPLES = 4.0, 2.0, 2
"""Sampled mean cross-entropies late in the run (at least ``DIVERGED_SAMPLES`` of them) this
many times log(C) in their median, after one at or below half of the median earlier, and every
step's loss there, sampled or not, ``DIVERGED_FLOOR`` times it in its median: the loss rose far
above that of predictions that ignore the input. Not every reading that high: a diverged model
thrashes, and a batch it happens to get right reads near 0 among readings of hundreds."""


def loss_diverged(
    samples: Sequence[tuple[int, int, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    maximize: str = "",
) -> Finding | None:
    """The sampled steps' loss, a mean cross-entropy over C classes (``samples``: step, C,
    factor, as for ``sampled_cross_entropies``), read ``DIVERGED_RATIO`` x log(C) or more in
    the median of the run's second half (``DIVERGED_SAMPLES`` readings or more; every step's
    there ``DIVERGED_FLOOR`` x log(C) in their median), all finite, after a reading at or below
    half that earlier: the model went from guessing to
    confidently wrong, as a learning rate far too high makes it while the values stay finite
    (an infinite loss is ``non-finite``'s). A model that starts far above log(C) is
    ``loss-at-init``'s and is not this. ``maximize``: the optimiser that steps (its class
    name) has ``maximize=True`` set, so it climbs the loss: that is the cause said, not the
    learning rate."""
    if not steps:
        return None
    read = sampled_cross_entropies(samples, steps, losses)
    if not all(math.isfinite(v) for _, _, v, _ in read):
        return None
    middle = (steps[0] + steps[-1]) / 2
    late = [r for s, _, _, r in read if s > middle]
    early = [r for s, _, _, r in read if s <= middle]
    if len(late) < DIVERGED_SAMPLES or not early:
        return None
    level = statistics.median(late)
    if level < DIVERGED_RATIO or min(early) > level / 2:
        return None
    classes = read[-1][1]
    # Every step's loss, not only the sampled ones', high too: one batch read on each sampled
    # step (a loader in a fixed order, as many batches an epoch as the sampling interval)
    # may be one the model legitimately gets wrong while it fits the others.
    if not typical_late_loss(steps, losses, middle, samples) >= DIVERGED_FLOOR * math.log(classes):
        return None
    low = min(value for s, _, value, _ in read if s <= middle)
    late_values = [value for s, _, value, _ in read if s > middle]
    cause = (
        f"{maximize} has maximize=True set, so each step climbs the loss it is given"
        if maximize
        else "a learning rate far too high?"
    )
    evidence: dict[str, Any] = {
        "classes": classes,
        "chance": round(math.log(classes), 4),
        "early_min": round(low, 4),
        "late_min": round(min(late_values), 4),
        "sampled_steps": len(read),
    }
    if maximize:
        evidence["maximize"] = maximize
    return Finding(
        "loss-diverged",
        "warning",
        f"the loss diverged: cross-entropy over {classes} classes read {low:.3f} early, then "
        f"{min(late_values):.3f}-{max(late_values):.3f} over the second half of the run (a "
        f"median {level:.1f}x log({classes}) = {math.log(classes):.3f}, the loss of predictions "
        f"that ignore the input): the model is confidently wrong ({cause})",
        evidence=evidence,
        fix=MAXIMIZE_FIX if maximize else "",
    )


def loss_climbed(
    samples: Sequence[tuple[int, str, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    maximize: str,
) -> Finding | None:
    """The sampled steps' loss, itself a regression loss (``samples``: step, function, e.g.
    ``mse_loss``), climbed while the optimiser that steps the weights, ``maximize`` (its class
    name), has ``maximize=True``: the median of the run's second half ``DIVERGED_RATIO`` x or
    more the lowest reading of its first half, and every step's loss there ``DIVERGED_FLOOR`` x
    it in its median. A regression loss has no level of its own to read (log(C)
    for a cross-entropy), so only this cause is judged: the optimiser climbs the loss it is
    given. All finite (an overflow is ``non-finite``'s)."""
    if not steps or not maximize:
        return None
    read = sampled_losses(samples, steps, losses)
    if not all(math.isfinite(v) for *_, v in read):
        return None
    middle = (steps[0] + steps[-1]) / 2
    early = [v for s, _, v in read if s <= middle]
    late = [v for s, _, v in read if s > middle]
    if len(late) < DIVERGED_SAMPLES or not early or min(early) <= 0:
        return None
    low, level = min(early), statistics.median(late)
    if level < DIVERGED_RATIO * low:
        return None
    if not typical_late_loss(steps, losses, middle, samples) >= DIVERGED_FLOOR * low:
        return None
    function = read[-1][1]
    return Finding(
        "loss-diverged",
        "warning",
        f"the loss diverged: {function} read {low:.4g} early, then {min(late):.4g}-"
        f"{max(late):.4g} over the second half of the run (a median {level / low:.1f}x its "
        f"early low): {maximize} has maximize=True set, so each step climbs the loss it is "
        "given",
        evidence={
            "function": function,
            "early_min": round(low, 6),
            "late_min": round(min(late), 6),
            "late_median": round(level, 6),
            "sampled_steps": len(read),
            "maximize": maximize,
        },
        fix=MAXIMIZE_FIX,
    )


MAXIMIZE_FIX = (
    "drop maximize=True from the optimiser: it steps up the gradient, raising the loss it is "
    "given (to maximise an objective on purpose, keep it and give it that objective, not a loss)"
)
