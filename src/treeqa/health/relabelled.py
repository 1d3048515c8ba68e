"""Evaluation targets indexed otherwise than the training ones (``evaluation-labels-permuted``):
a label vocabulary built again for the validation split, in order of first appearance
(``{c: i for i, c in enumerate(df.label.unique())}``), sorted where the split lacks a class,
fitted anew by an encoder; labels counted from 1 in the test file and from 0 in training. The
model learns the training indices; scored against others, its validation accuracy sits near
chance or below while it trains well, and reads as overfitting.

Sampled training cross-entropies (``cross_entropy``, ``nll_loss`` over ``[N, C]``) count how
often the model's argmax is the target (soft targets': their own argmax); an evaluation's (without
gradients), and its comparisons of two vectors of class indices as long as its outputs' rows
(``pred == y``, in the window ``predictions.py`` opens after an evaluation's forward), add up
a confusion matrix over the C classes on the device, one for each set scored. At the clock's
next step or the run's end (one host read) each is judged (``_pairing``): where the model
trained to ``LEARNED`` accuracy or more, and the evaluation pairs the classes one to one, each
with its commonest partner and mutually, two classes or more with another, the pairs right
``GAIN`` more than the diagonal (the accuracy reported), the targets were indexed otherwise;
unless the set so paired is one the training drew from, or two sets pair alike: then the
pairing is how the script reads its scores (a decoding off by one), not a split's indices. A
model merely poor, collapsed, or confusing two classes both ways while the diagonal leads,
pairs no such way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import checks, sites
from treeqa.health.findings import Finding

LEARNED = 0.6
"""Training accuracy (sampled cross-entropies' argmax against their targets) the model reached."""
MAPPED = 0.6
"""Share of an evaluation's examples the one-to-one pairing of classes gets right."""
GAIN = 0.1
"""How much more of them it gets right than the identity (the accuracy reported)."""
HELD = 0.9
"""Share of the examples the mutual pairs must hold, by rows and by columns."""
MOVED = 0.1
"""Share of the examples in classes paired with another (2 of 10 classes swapped hold 0.2)."""
LEAST = 5
"""Examples of a class for its pairing to be read."""
ROWS = 50
"""Examples an evaluation scored for it to be judged."""
TENSORS = 16
"""The latest tensors given to sampled training forwards kept (whose slices they were)."""
CLASSES = 256
"""The most classes counted (a confusion of C x C counts)."""


class EvaluationLabels:
    """``add``: where the finding goes; ``sampling``: whether this step is sampled. Told of
    every cross-entropy's ``target`` (``LossInputCheck.targets``) and of an evaluation's
    comparisons of class indices (``Predictions``); ``judge`` at the clock's steps."""

    def __init__(
        self, add: Callable[[Finding], None], sampling: Callable[[], bool], trained_on: set[int]
    ) -> None:
        self.add = add
        self.sampling = sampling
        # what the training drew from: datasets (``Loaders.trained_on``, the same set), and
        # the tensors sampled training forwards were given slices of
        self.trained_on = trained_on
        self.trained_tensors: dict[int, None] = {}  # (the latest ``TENSORS``, in order)
        self.said = False
        # [2]: sampled training rows right, in all, since the last evaluation judged
        self.trained: torch.Tensor | None = None
        self.classes = 0  # of the sampled training cross-entropies
        # this evaluation's confusions, by where they were read ("loss", "compared") and what
        # was scored (``source``): [C, C]
        self.confusions: dict[tuple[str, int], torch.Tensor] = {}
        self.where = ""
        self.source = 0  # the data the evaluation's last forward was given
        self.draws = -1  # the loaders' draws counted at that forward
        self.sources: dict[int, int] = {}  # the source of its forward of so many rows, by rows
        self.inputs: set[int] = set()  # the memory of its forwards' integer inputs (token ids)

    def target(self, target: Any, loss: Any, ignore_index: Any = -100, logits: Any = None) -> None:
        """A ``cross_entropy``/``nll_loss`` over ``logits`` made ``loss`` of ``target``."""
        if (
            self.said
            or not isinstance(logits, torch.Tensor)
            or not isinstance(target, torch.Tensor)
        ):
            return
        grad = isinstance(loss, torch.Tensor) and loss.requires_grad
        if grad and not self.sampling():
            return
        classes = logits.shape[1] if logits.dim() == 2 else 0
        if grad and target.is_floating_point() and target.shape == logits.shape:
            target = torch.ops.aten.argmax.default(target.detach(), 1)  # soft targets' class
        if target.dim() != 1 or target.is_floating_point() or not 2 <= classes <= CLASSES:
            return
        if checks.untraceable(logits) or checks.untraceable(target):  # vmap, compile
            return
        target = target.detach()
        if isinstance(ignore_index, int) and 0 <= ignore_index < classes:  # (a pad class)
            target = target.masked_fill(target == ignore_index, -1)
        predicted = torch.ops.aten.argmax.default(logits.detach(), 1)  # (not torch.argmax: wrapped)
        confusion = _confusion(target, predicted, classes)
        if grad:
            right = torch.stack([confusion.diagonal().sum(), confusion.sum()])
            if self.trained is not None and self.classes == classes:
                right = right + self.trained
            self.trained, self.classes = right, classes
        else:
            self._count("loss", confusion)

    def training(self, given: list[torch.Tensor]) -> None:
        """A sampled training forward was ``given`` these tensors: slices of what it trains on."""
        if given and not self.said:
            self.trained_tensors[_whole(given[0])] = None
            if len(self.trained_tensors) > TENSORS:  # (a loader's batches: each a new one)
                del self.trained_tensors[next(iter(self.trained_tensors))]

    def evaluating(self, first: torch.Tensor | None, draws: int, data: int) -> None:
        """An evaluation's forward, given ``first`` (its first tensor): what it scores is what
        the newest loader iterator draws from (``data``) where a batch was drawn since the last
        forward (``draws`` counts them), else the tensor ``first`` is a slice of, or is (a
        training accuracy beside a validation one, each its own)."""
        if draws != self.draws:
            self.draws, self.source = draws, data
        elif first is not None:
            self.source = _whole(first)
        if first is not None:
            self.sources[first.shape[0]] = self.source
            if not first.is_floating_point() and memory_of(first):
                self.inputs.add(memory_of(first))

    def compared(self, a: torch.Tensor, b: torch.Tensor, classes: int, rows: int) -> None:
        """An evaluation whose outputs have ``classes`` columns (``rows`` so far) compared ``a``
        with ``b``, two vectors: class indices of one forward's rows, or of all so far."""
        if self.said or classes != self.classes or a.is_floating_point() or b.is_floating_point():
            return
        if a.dtype == torch.bool or b.dtype == torch.bool or a.shape != b.shape:
            return
        n = a.shape[0]
        if n not in self.sources and n != rows:
            return  # (not a count of rows the evaluation scored)
        if self.inputs and (memory_of(a) in self.inputs or memory_of(b) in self.inputs):
            return  # (the model's own input ids: a language model's next token against them)
        source, self.source = self.source, self.sources.get(n, self.source)
        self._count("compared", _confusion(a.detach(), b.detach(), classes))
        self.source = source

    def _count(self, read: str, confusion: torch.Tensor) -> None:
        key = (read, self.source)
        held = self.confusions.get(key)
        if confusion.shape[0] != self.classes or (
            held is not None and held.shape != confusion.shape
        ):
            return  # (classes the training's cross-entropies did not have)
        self.confusions[key] = confusion if held is None else held + confusion
        if not self.where:
            self.where = sites.user_site()

    def judge(self) -> None:
        """The clock stepped, or the run ended: the evaluation since the last judged."""
        confusions, self.confusions = self.confusions, {}
        where, self.where = self.where, ""
        self.sources, self.inputs = {}, set()
        if self.said or not confusions or self.trained is None:
            return
        device = self.trained.device
        flat = [c.flatten().to(device, torch.float64) for c in confusions.values()]
        read = torch.cat([self.trained.to(torch.float64), *flat]).tolist()
        right, rows = read[:2]
        if rows >= ROWS:  # (the next evaluation is judged by the training since this one)
            self.trained = None
        if rows == 0 or right / rows < LEARNED:
            return
        c = self.classes
        pairings = []
        sources: dict[frozenset[frozenset[int]], set[int]] = {}  # each pairing's sets scored
        for n, (_, source) in enumerate(confusions):
            counts = read[2 + n * c * c : 2 + (n + 1) * c * c]
            pairing = _pairing([counts[i * c : (i + 1) * c] for i in range(c)])
            if pairing is not None:
                pairings.append(pairing)
                edges = frozenset(frozenset(pair) for pair in pairing[0].items())
                sources.setdefault(edges, set()).add(source)
        trained = self.trained_on | self.trained_tensors.keys()
        if any(len(scored) > 1 or scored & trained for scored in sources.values()):
            return  # (the training data, or two sets, scored alike: how scores are read)
        if pairings:
            self.said = True
            found = evaluation_labels_permuted(*pairings[0], right / rows)
            found.where = where
            self.add(found)


def _confusion(a: torch.Tensor, b: torch.Tensor, classes: int) -> torch.Tensor:
    """[C, C] counts of (a, b) pairs of class indices in [0, C) (others left out)."""
    a, b = a.reshape(-1).long(), b.reshape(-1).long()
    valid = (a >= 0) & (a < classes) & (b >= 0) & (b < classes)
    pairs = (a * classes + b).clamp(0, classes * classes - 1)
    return torch.bincount(pairs, valid.long(), classes * classes).reshape(classes, classes)


def _whole(x: torch.Tensor) -> int:
    """The identity of the tensor ``x`` is a view of (``x_val[i : i + 64]``'s: ``x_val``)."""
    return id(x._base if x._base is not None else x)


def memory_of(x: torch.Tensor) -> int:
    """The address of the memory ``x`` views (0 where it has none to read)."""
    try:
        return int(x.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return 0


def _pairing(counts: list[list[float]]) -> tuple[dict[int, int], float, float] | None:
    """Of a confusion, each row's class (of ``LEAST`` examples or more) paired with its
    commonest column where that column's commonest row is it again (mutual: one to one), the
    pairs holding ``HELD`` of the examples or more by rows and by columns (a few stray
    predictions of a class no target has are let be; a model collapsing several classes onto
    one pairs half of them with no one), two or more not with themselves, holding ``MOVED`` of
    the examples or more, the pairs right for ``MAPPED`` of the examples and ``GAIN`` more than
    the diagonal: (the pairs moved, the pairing's share, the diagonal's); else None."""
    n = len(counts)
    total = sum(map(sum, counts))
    if total < ROWS:
        return None
    columns = [[counts[i][j] for i in range(n)] for j in range(n)]
    rows = [i for i in range(n) if sum(counts[i]) >= LEAST]
    partner = {i: max(range(n), key=counts[i].__getitem__) for i in rows}
    pairs = {i: j for i, j in partner.items() if max(range(n), key=columns[j].__getitem__) == i}
    by_rows = sum(sum(counts[i]) for i in pairs) / total
    by_columns = sum(sum(columns[j]) for j in pairs.values()) / total
    if by_rows < HELD or by_columns < HELD:
        return None
    moved = {i: j for i, j in pairs.items() if i != j}
    mapped = sum(counts[i][j] for i, j in pairs.items()) / total
    diagonal = sum(counts[i][i] for i in range(n)) / total
    held = sum(sum(counts[i]) for i in moved) / total
    if len(moved) < 2 or held < MOVED or mapped < MAPPED or mapped - diagonal < GAIN:
        return None
    return moved, mapped, diagonal


def evaluation_labels_permuted(
    moved: dict[int, int], mapped: float, diagonal: float, trained: float
) -> Finding:
    """An evaluation whose classes pair one to one with others (``moved``), right for
    ``mapped`` of its examples where the accuracy reads ``diagonal``; ``trained``: the
    sampled training accuracy."""
    pairs = ", ".join(f"{i} -> {j}" for i, j in list(moved.items())[:6])
    return Finding(
        "evaluation-labels-permuted",
        "warning",
        f"the evaluation's targets and predictions pair the classes one to one, but not each "
        f"with itself ({pairs}{', ...' if len(moved) > 6 else ''}): read through that pairing "
        f"the model is right on {mapped:.0%} of the examples, where the accuracy reads "
        f"{diagonal:.0%} (training, {trained:.0%}). The evaluation's class indices are not the "
        "training ones: a label vocabulary built again for the split (in order of first "
        "appearance, or sorted where a class is missing), or labels counted from 1 in one file "
        "and from 0 in the other",
        evidence={
            "pairs": {str(i): j for i, j in moved.items()},
            "mapped": round(mapped, 3),
            "accuracy": round(diagonal, 3),
            "trained": round(trained, 3),
        },
    )
