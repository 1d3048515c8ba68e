"""``target-in-features``: the training target is among the model's input features. The label
column left in the feature matrix (``data[:, :]`` for ``data[:, :-1]``), a one-hot label
concatenated with the features, a window over a series that runs one value too far and ends
on the value it is to predict. Nothing fails: the model reads the answer off its input, the
loss falls near 0, and a validation set built the same way scores as well; on data without
the label (the only data it will ever be used on) the model knows nothing.

On a sampled training step, the trained model's forwards are given tensors; each of two dims
or more with ``ROWS`` or more rows and 2 to ``COLUMNS`` values a row is kept, as [B, F]. A
training loss of one target a row (``cross_entropy``, ``nll_loss``: class indices [B];
``binary_cross_entropy(_with_logits)`` and the regression losses: [B] or [B, 1]) that is the
step's loss (its backward's, constant factors aside: not a term of a sum, an auxiliary task
that reconstructs one feature) is read against them, on the device: a column that is the
target times a constant plus a constant (the least-squares line through them leaves at most
``RESIDUAL`` of the target's spread: a copy, or the label standardised with the features), or
for class targets the 0/1 indicator of one class (a one-hot label). A column that is so on
every sampled step that judged it, ``STEPS`` or more of ``JUDGED_ROWS`` rows in all, makes
the finding: a leak holds on every batch, while a feature that agrees with the label on most
rows (a test's verdict, last year's grade, a teacher's prediction) matches a whole batch now
and then. A batch judges a target only with ``SIDE`` rows or more on each side of its mean. Not read: an input that is the target's own storage
(labels given to a model that computes its loss, sliced there), an input every column of
which is the target (a one-hot label given on purpose: ArcFace's margin), and targets that
count the batch's rows (in-batch targets, ``arange(B)``). A series sampled so
finely that each value is nearly the last (a sine at 0.01 rad a step: the line leaves 1% of
its spread) is no copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import checks, sites
from treeqa.health.findings import Finding
from treeqa.health.heldout import given

ROWS = 16
"""The fewest rows in a batch read."""
COLUMNS = 4096
"""The most values a row of an input may have to be read column by column (not an image's)."""
READ_ROWS = 1024
"""Rows of a batch read, at most."""
RESIDUAL, ROUNDED = 1e-4, 0.02
"""The most a column's least-squares line may leave of the target's standard deviation, as a
share of it, for the column to be the target (a copy: 0; standardised in float32: ~1e-7). In a
float16 or bfloat16 input, a copy is rounded to the format's grid: there, the format's epsilon
times the column's root mean square over its spread, up to ``ROUNDED`` (prices of 3-4 copied
into them left 1.8e-3 and 1.6e-2 of their spread, and were missed at 1e-4)."""
SIDE = 4
"""The fewest rows on each side of a target's mean (a class and the rest) for a batch to
judge it: a rare word present in the one positive row of a batch is no copy of the label."""
STEPS, JUDGED_ROWS = 4, 1024
"""Sampled steps that judged a column, and their rows, every one finding it the target. A
feature that agrees with a binary label on 97-99% of the rows matched whole batches of 32-64
on 40% of them (19 of 40), a teacher 97% right (its one-hot prediction beside the features,
for a student) one class's indicator as often: 4 batches of 64 in a row from the first were
enough for such a feature at times (a run of the teacher's was named with 4); a feature wrong
on 1 row in 300 agrees with 1,024 rows 3% of the time (an annotator's one-hot label, wrong on
1 row in 100, beside the features, read by one class's indicator: 608 rows agreed), one wrong
on 1 in 50 never."""
LATE = 0.75
"""The share of the run's steps after which a column's last judgement must fall: an AC-GAN's
generator trained on its auxiliary loss alone for a warm-up, then on a sum, judged no more."""
CLASSES = 64
"""The most classes whose indicators are read against the columns."""
INPUTS = 8
"""Input tensors of a step kept, the latest (micro-batches, several forwards)."""
TARGETED = ("cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits")
"""Losses of class or binary targets read (and ``losses.ELEMENTWISE``, the regression ones)."""

Place = tuple[int, tuple[int, ...], int]
"""An input's place among a forward's tensors, its size past the batch dim, and the targets
read against it: 1 (the value) + the classes whose indicators are."""


class FeatureLeaks:
    """``forward`` keeps a sampled training forward's inputs, ``target`` reads a loss's
    target against them, ``backward`` keeps what the step's loss found, ``finish`` judges at
    the run's end; one finding in a run."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        # the step's inputs: place, size past the batch dim, values [B, F], where they start
        self.inputs: list[tuple[int, tuple[int, ...], torch.Tensor, int]] = []
        self.step = -1
        # read this step: the input's place, [F, K] columns found, [K] targets judged, the
        # target's fingerprint, the loss's autograd node, function, rows, line
        self.pending: list[
            tuple[Place, torch.Tensor, torch.Tensor, torch.Tensor, Any, str, int, str]
        ] = []
        # each place's columns found on every step that judged them, those steps and their
        # rows (a batch seen again, full-batch training's, counted once), [F, K], [K], [K],
        # and the last batch's fingerprint, on the device; the last loss's function and line
        self.held: dict[Place, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.about: dict[Place, tuple[str, int, str, int]] = {}  # (and the step judged last)

    def forward(self, args: tuple[Any, ...], kwargs: dict[str, Any] | None, step: int) -> None:
        """A trained model's forward on sampled training step ``step``."""
        if torch.jit.is_tracing():
            return
        if step != self.step:
            self.inputs, self.pending, self.step = [], [], step
        for at, x in enumerate(given(args, kwargs)):
            if x.dim() < 2 or x.shape[0] < ROWS or checks.untraceable(x) or x.is_complex():
                continue
            if 2 <= x[0].numel() <= COLUMNS and x.dtype != torch.bool:
                rows = x.detach()[:READ_ROWS].reshape(min(len(x), READ_ROWS), -1)
                self.inputs.append((at, tuple(x.shape[1:]), rows, x.data_ptr()))
        self.inputs = self.inputs[-INPUTS:]

    def target(self, fname: str, input: Any, target: Any, result: torch.Tensor) -> None:
        """A training loss ``result = fname(input, target)`` on a sampled step."""
        if not self.inputs or not isinstance(target, torch.Tensor):
            return
        if not isinstance(input, torch.Tensor) or not checks.dense(target):
            return
        if checks.untraceable(target) or result.numel() != 1:
            return
        rows = target.shape[0] if target.dim() else 0
        if rows < ROWS or target.numel() != rows or input.shape[0] != rows:
            return
        classes = fname in ("cross_entropy", "nll_loss") and not target.is_floating_point()
        count = int(input.shape[1]) if classes and input.dim() == 2 else 0
        count = count if 2 < count <= CLASSES else 0
        y = target.detach()[:READ_ROWS].reshape(-1)
        # (not labels given to a model that computes its own loss on a slice of them)
        read = [
            (at, shape, x)
            for at, shape, x, start in self.inputs
            if len(x) == len(y) and start != target.data_ptr()
        ]
        if not read:
            return
        fingerprint, where = _fingerprint(y), sites.user_site(3)
        for at, shape, x in read:
            found, judged = _columns(x, y, count)
            pending = ((at, shape, 1 + count), found, judged, fingerprint, result.grad_fn)
            self.pending.append((*pending, fname, len(y), where))

    def backward(self, node: Any) -> None:
        """A sampled step's backward, of a loss whose autograd node (constant factors walked
        back) is ``node``: what the loss it is found is kept, on the device; a loss summed
        with others does not count."""
        pending, self.pending, self.inputs = self.pending, [], []
        for place, found, read, fingerprint, grad_fn, fname, rows, where in pending:
            if grad_fn is not node:
                continue
            kept = self.held.get(place)
            if kept is not None and kept[0].shape == found.shape:
                new = (fingerprint != kept[3]).to(read.dtype)  # not the batch judged last
                # a column stays found while every step that judged its target found it
                found = kept[0] & (found | ~read.bool())
                count, seen = kept[1] + read * new, kept[2] + read * new * rows
            else:
                found = found | ~read.bool()  # (targets not judged yet keep every column)
                count, seen = read, read * rows
            self.held[place] = (found, count, seen, fingerprint)
            self.about[place] = (fname, rows, where, self.step)

    def finish(self, step: int) -> None:
        """The run ended at ``step``: a column found on every sampled step that judged it,
        enough of them, the last late in the run (one host read)."""
        places = [p for p in self.held if self.about[p][3] >= LATE * step]
        if not places:
            return
        device = self.held[places[0]][0].device
        enough = [
            _first(found & ((n >= STEPS) & (seen >= JUDGED_ROWS))[None, :]).to(device)
            for found, n, seen, _ in (self.held[p] for p in places)
        ]
        values = torch.stack(enough).tolist()  # [places, 2]
        for place, (column, kind) in zip(places, values, strict=True):
            if column >= 0:
                at, shape, _ = place
                fname, rows, where, _ = self.about[place]
                steps = int(self.held[place][1][int(kind) + 1])  # (one more read, once)
                self.add(
                    target_in_features(fname, at, shape, int(column), int(kind), rows, steps, where)
                )
                return


def _fingerprint(y: torch.Tensor) -> torch.Tensor:
    """A batch's targets [B] as one number, on their device: the same batch read again (a
    full batch, every step) gives the same."""
    wide = checks.wide(y.device)
    weights = torch.arange(1, len(y) + 1, device=y.device, dtype=wide)
    return (y.to(wide) * weights).sum()


def _columns(x: torch.Tensor, y: torch.Tensor, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """On ``x``'s device: [F, K] which columns of ``x`` [B, F] are ``y`` [B] up to a constant
    factor and offset (k = 0) or the indicator of class k - 1 of ``classes`` > 2 classes of
    integer ``y``; [K] which targets the batch judges (``SIDE``). None where every column is
    (the input is the target itself)."""
    wide = checks.wide(x.device)
    half = x.dtype in (torch.float16, torch.bfloat16)
    eps = torch.finfo(x.dtype).eps if half else 0.0
    x, y = x.to(wide), y.to(x.device, wide)
    with torch.no_grad():
        targets = [y]  # [B] each
        if classes:
            targets += [(y == c).to(wide) for c in range(classes)]
        ys = torch.stack(targets, 1)  # [B, K]
        mean = ys.mean(0)
        judged = ((ys > mean).sum(0) >= SIDE) & ((ys < mean).sum(0) >= SIDE)  # [K]
        xc, yc = x - x.mean(0), ys - mean  # [B, F], [B, K]
        covariance = xc.T @ yc  # [F, K]
        x_norm, y_norm = xc.square().sum(0), yc.square().sum(0)  # [F], [K]
        # share of y's variance the best line through (x_j, y_k) leaves: 1 - r^2
        left = 1 - covariance.square() / (x_norm[:, None] * y_norm[None, :]).clamp_min(1e-300)
        # a copy rounded to a 16-bit input's grid leaves about its epsilon times the values'
        # size over their spread: [F]
        grid = eps * x.square().mean(0).sqrt() / (x_norm / len(x)).sqrt().clamp_min(1e-300)
        residual = grid.clamp(RESIDUAL, ROUNDED)[:, None]  # [F, 1]
        found = (left <= residual**2) & judged[None, :] & (x_norm[:, None] > 0)  # [F, K]
        # every column that varies the target: the label given on purpose (a one-hot's
        # columns of classes not in the batch are 0 throughout)
        found &= ~(found.any(1) | (x_norm == 0)).all()
        # targets that count the batch's rows (in-batch targets, arange(B) plus an offset: a
        # contrastive loss's) match any index among the inputs
        found &= ~(y - y[0] == torch.arange(len(y), device=y.device)).all()
        return found, judged.to(torch.int32)


def _first(found: torch.Tensor) -> torch.Tensor:
    """[2]: the first column of ``found`` [F, K] set (the value's before any class's) and
    its target (-1: the value; else the class); -1, -1 where none is."""
    flat = found.T.reshape(-1).to(torch.int8)  # class-major
    first = flat.argmax()
    column, kind = first % found.shape[0], first // found.shape[0] - 1
    none = torch.tensor(-1, device=found.device)
    hit = flat[first] > 0
    return torch.stack([torch.where(hit, column, none), torch.where(hit, kind, none)])


def target_in_features(
    fname: str,
    at: int,
    shape: tuple[int, ...],
    column: int,
    kind: int,
    rows: int,
    steps: int,
    where: str,
) -> Finding:
    """Column ``column`` of the forward's input ``at`` (``shape`` a row) held the target of
    ``fname`` (its value, or class ``kind``'s indicator) on every one of ``steps`` sampled
    steps, the last of ``rows`` rows."""
    flat = column
    place: list[int] = []  # the column's index in a row of ``shape``
    for size in reversed(shape):
        column, index = divmod(column, size)
        place.insert(0, index)
    what = "the target" if kind < 0 else f"1 exactly where the target is class {kind}"
    return Finding(
        "target-in-features",
        "warning",
        f"the value at {place} of each row of the model's input {at} ({list(shape)} a row) is "
        f"{what} of {fname}, up to a constant factor and offset, in every row of the "
        f"{steps} sampled steps that judged it ({rows} rows the last): the label left among "
        "the features, or a target that is an exact function of one input; a model that "
        "reads it off learns nothing else, and its loss, or a validation score of data built "
        "the same way, says nothing of what it can do on data without it",
        where=where,
        evidence={
            "function": fname,
            "input": at,
            "column": flat,
            "place": place,
            "class": None if kind < 0 else kind,
            "rows": rows,
            "steps": steps,
        },
    )
