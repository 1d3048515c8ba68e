"""``dataset-changed-in-place``: the data a model trains on, changed in place by its own reading.

A Dataset's ``__getitem__`` that takes ``x = self.data[i]`` (a view of the stored tensor or NumPy
array) and normalises, scales or augments it in place (``x.sub_(mean).div_(std)``,
``x /= 255``, ``x += noise``) writes into the stored example; so does a loop that slices its
batches as views (``xb = X[i:i + bs]``) and then does the same to ``xb``, or a forward that adds
a position table in place to its input. Each pass over the data transforms every example once
more: the second epoch trains on ``x / 255**2``, the tenth on noise ten draws deep, and an
evaluation set treated so drifts between evaluations. Nothing fails; the loss climbs after the
first epoch or the model forgets what it learnt.

Where it is read (no per-step cost): each DataLoader's dataset, when an iterator over it is made
(each pass), for its floating tensors and NumPy arrays (attributes of the dataset and of the
datasets it wraps, ``TensorDataset.tensors``, lists of per-example arrays); again on sampled
training steps, where the doctor kept the batch's dataset indices (mapped to each array's rows
through Subsets and ConcatDatasets); and, on sampled training steps and in evaluations, the
tensor a model's input is a view of (``x._base``, ``VIEWED`` times its size or more); once more
when the run ends. ``POSITIONS`` values of each, at fixed positions, are read (one host read)
and compared with the read before. An interval in which ``CHANGED`` positions or more changed
counts, unless they all held one value before (a cache first filled). The finding: the rows
batches just drew (or sliced off; read again after the forward) changed since the read before
more than the other rows (``DRAWN``: changed as they are read, not rewritten between passes,
nor updated after the step as a memory bank is), and
``REPEATED`` positions or more (``REPEATED_SHARE`` of them) changed in two intervals or more and
moved on from where their first change left them (their RMS changed by ``DRIFT`` or more again,
or their distance from the first read grew ``FARTHER`` times; new draws of an augmentation
written from clean data move no farther); or intervals that set their positions to one value
(an erasing, 0), twice or more, leaving that many more positions at it. A dataset's array is
judged only where its rows are the size of a row of a model's input, or it is 1-D (a series cut
into windows, a target).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from treeqa.health import checks, sites
from treeqa.health.findings import Finding

POSITIONS = 1024
"""Values read of each array (fewer for smaller arrays)."""
ITEMS, ITEM_POSITIONS = 64, 16
"""A list of per-example arrays: items read, and values read of each."""
SMALLEST = 1024
"""Arrays (or lists' items together) of fewer values are not read."""
VIEWED = 2
"""A model input counts as sliced from a tensor that holds this many times its values or more."""
CHANGED = 8
"""Positions that must change between two reads for the interval to count."""
REPEATED, REPEATED_SHARE = 16, 0.02
"""Positions transformed twice or more that make the finding (the larger of the two)."""
DRIFT, FARTHER = 1.1, 1.25
"""Their RMS moved again by this factor, or their distance from the first read grew so."""
DRAWN, AS_READ, ABOVE = 8, 0.05, 1.5
"""The rows batches just drew (or sliced off) change as they are read: of their positions read
(``DRAWN`` or more), the share changed since the read before is ``AS_READ`` more than the
other rows' share and ``ABOVE`` times it. An array rewritten whole between passes (an
augmentation drawn afresh from clean data, a cache refreshed), or rows updated after the step
(a memory bank, a persistent adversarial perturbation), change alike or not at all."""
SOURCES = 32
"""The most arrays followed."""
DEPTH = 3
"""Datasets looked into through the datasets they hold (``Subset.dataset``)."""


@dataclass
class Source:
    """One array (or list of arrays) followed: where it is, what was read of it last."""

    ref: Any  # weakref to the array or list
    name: str
    row_size: int  # values a row (an example) holds
    where: str
    manual: bool  # a tensor a model's input was sliced from
    index: Any = None  # positions: a tuple of index arrays (tensors on the tensor's device)
    items: list[tuple[int, int | None, np.ndarray]] = field(default_factory=list)
    first: np.ndarray | None = None  # the first read
    last: np.ndarray | None = None  # the latest
    after: np.ndarray | None = None  # each position's value after its first transform
    counts: np.ndarray | None = None  # intervals each position was transformed in
    fills: dict[float, int] = field(default_factory=dict)  # intervals that set one value
    row_of: np.ndarray | None = None  # each position's row (its example)
    # positions of rows a batch just drew (or sliced off), read against the read before, and
    # those of the other rows: [read, changed] each
    drawn: list[int] = field(default_factory=lambda: [0, 0])
    others: list[int] = field(default_factory=lambda: [0, 0])


class ChangedData:
    """``add``: where the finding goes. ``loader_made`` at each DataLoader iterator made,
    ``forward`` on each sampled training forward and each evaluation's, ``forward_done`` when
    it ends, ``finish`` when the run does."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.sources: dict[int, Source] = {}
        # a loader's dataset's, by its id (the dataset weakly), with the map from its indices
        # to their rows
        self.of_dataset: dict[int, tuple[Any, list[tuple[Source, Rows]]]] = {}
        self.drawn_at = -1  # the step whose drawn batches were read (its first forward's)
        # the tensors this forward's inputs were sliced from, with the rows they cover: read
        # again when it ends (a forward that changes its input in place)
        self.sliced: list[tuple[Source, np.ndarray | None]] = []
        self.row_sizes: set[int] = set()  # values a row of a model's input holds
        self.said = False

    def loader_made(self, loader: Any) -> None:
        dataset = getattr(loader, "dataset", None)
        if self.said or not isinstance(dataset, Dataset):
            return
        where = ""
        known = self.of_dataset.get(id(dataset))
        if known is None or known[0]() is not dataset:  # (not another at a freed one's id)
            try:
                known = self.of_dataset[id(dataset)] = (weakref.ref(dataset), [])
            except TypeError:  # a dataset that takes no weak reference
                return
        mine = known[1]
        for name, array, rows in _arrays(dataset):
            held = array() if isinstance(array, Held) else array  # (the list itself)
            source = self.sources.get(id(held))
            if source is None or source.ref() is not held:
                if len(self.sources) >= SOURCES:
                    continue
                where = where or sites.user_site()
                source = _source(array, name, where, manual=False)
                if source is None:
                    continue
                self.sources[id(held)] = source
            if all(s is not source for s, _ in mine):
                mine.append((source, rows))
            self._read(source)

    def forward(
        self, inputs: list[torch.Tensor], drawn: list[tuple[Any, Any]], step: int = -1
    ) -> None:
        """A sampled training forward's tensors, or an evaluation's (``heldout.given``), and
        the batches drawn for it: (their loader's dataset, their indices in it), read at the
        step's first forward (a second forward after the loop updated rows it drew by design,
        an adversarial perturbation, is no reading)."""
        if self.said:
            return
        if step != self.drawn_at:
            self.drawn_at = step
            for dataset, indices in drawn:
                known = self.of_dataset.get(id(dataset))
                if known is None or known[0]() is not dataset:
                    continue
                for held, rows in known[1]:
                    if rows is not None and indices is not None and held.ref() is not None:
                        picked = rows(np.asarray(indices, dtype=np.int64).reshape(-1))
                        self._read(held, picked[picked >= 0])
        for x in inputs:
            if not x.is_floating_point() or checks.untraceable(x):
                continue
            self.row_sizes.add(x.numel() // max(x.shape[0], 1))
            base = x._base
            if base is None or base.numel() < VIEWED * x.numel() or not checks.dense(base):
                continue
            source = self.sources.get(id(base))
            if source is None or source.ref() is not base:
                if len(self.sources) >= SOURCES:
                    continue
                name = f"the tensor {list(base.shape)} the model's input is sliced from"
                source = _source(base, name, sites.user_site(), manual=True)
                if source is None:
                    continue
                self.sources[id(base)] = source
            covered = _covered(x, base)
            self._read(source, covered)
            self.sliced.append((source, covered))

    def forward_done(self) -> None:
        """The forward ended: the tensors its inputs were sliced from are read again."""
        sliced, self.sliced = self.sliced, []
        for source, covered in sliced:
            if not self.said:
                self._read(source, covered)

    def finish(self, steps: Sequence[float] = (), losses: Sequence[float] = ()) -> None:
        """The run ended: each array is read once more."""
        for source in list(self.sources.values()):
            if self.said:
                return
            if source.ref() is not None:
                self._read(source)

    def _read(self, source: Source, drawn: np.ndarray | None = None) -> None:
        """Read ``source`` again; ``drawn``: the rows of the batch just drawn from it (or
        sliced off it), whose positions' changes since the read before are counted."""
        values = _values(source)
        if values is None:
            return
        last, source.last = source.last, values
        if last is None:
            source.first = values
            source.counts = np.zeros(len(values), dtype=np.int64)
            source.after = np.full(len(values), np.nan)
            return
        assert source.counts is not None and source.after is not None
        changed = ~((last == values) | (np.isnan(last) & np.isnan(values)))
        if drawn is not None and source.row_of is not None and len(drawn):
            just = np.isin(source.row_of, drawn)
            for kept, these in ((source.drawn, just), (source.others, ~just)):
                kept[0] += int(these.sum())
                kept[1] += int((these & changed).sum())
        old, new = last[changed], values[changed]
        if changed.sum() < CHANGED or (np.isfinite(old).all() and np.ptp(old) == 0):
            return  # (a first fill: a cache written once)
        if np.isfinite(new).all() and np.ptp(new) == 0:  # erased to one value
            source.fills[float(new[0])] = source.fills.get(float(new[0]), 0) + 1
        source.counts[changed] += 1
        once = changed & (source.counts == 1)
        source.after[once] = values[once]
        self._judge(source)

    def _judge(self, source: Source) -> None:
        assert source.counts is not None and source.first is not None
        assert source.last is not None and source.after is not None
        if not source.manual and source.row_size not in {1, *self.row_sizes}:
            return  # (no model input has rows of its size: soft targets, weights)
        if not _as_read(source):
            return  # (not seen changing as its rows are drawn: rewritten between passes)
        repeated = source.counts >= 2
        least = max(REPEATED, REPEATED_SHARE * len(source.counts))
        found = None
        if repeated.sum() >= least:
            first, after, now = (a[repeated] for a in (source.first, source.after, source.last))
            found = _moved(first, after, now)
        for value, fills in source.fills.items():
            grew = int((source.last == value).sum() - (source.first == value).sum())
            if found is None and fills >= 2 and grew >= least:
                found = {"value": value, "fills": fills, "grew": grew}
        if found is None:
            return
        self.said = True
        finding = dataset_changed_in_place(
            source.name, source.manual, int(repeated.sum()), len(source.counts), found
        )
        finding.where = source.where
        self.add(finding)


Rows = Callable[[np.ndarray], np.ndarray] | None
"""From a loader's dataset indices to an array's rows (-1: none of its rows); None: unknown."""


def _arrays(
    dataset: Any, depth: int = 0, path: str = "", rows: Rows = None
) -> Iterator[tuple[str, Any, Rows]]:
    """(name, array, rows) for the floating tensors and NumPy arrays a dataset holds, and lists
    of per-example ones, in its attributes and those of the datasets it holds; ``rows`` maps
    the loader's indices to the array's rows, through Subsets and ConcatDatasets."""
    held = vars(dataset) if hasattr(dataset, "__dict__") else {}
    owner = path or type(dataset).__name__
    rows = rows if depth else _same
    for attr, value in held.items():
        name = f"{owner}.{attr}"
        if _floating(value):
            yield name, value, _of(rows, dataset, value)
        elif isinstance(value, Dataset) and depth < DEPTH:
            inner = _through(rows, getattr(dataset, "indices", None) if attr == "dataset" else None)
            yield from _arrays(value, depth + 1, name, inner)
        elif isinstance(value, list | tuple) and value:
            if all(isinstance(v, Dataset) for v in value[:8]) and depth < DEPTH:
                starts = [0, *getattr(dataset, "cumulative_sizes", [])]
                for i, v in enumerate(value[:8]):
                    part = _part(rows, starts, i) if len(starts) > len(value) else None
                    yield from _arrays(v, depth + 1, f"{name}[{i}]", part)
            elif isinstance(value, tuple) and len(value) <= 8:  # TensorDataset.tensors
                for i, v in enumerate(value):
                    if _floating(v):
                        yield f"{name}[{i}]", v, _of(rows, dataset, v)
            if isinstance(value, list) and len(value) >= ITEMS // 4 and _item_column(value) != -1:
                yield name, Held(dataset, attr), _of(rows, dataset, value)
        elif isinstance(value, dict) and len(value) <= 8:
            for key, v in value.items():
                if _floating(v):
                    yield f"{name}[{key!r}]", v, _of(rows, dataset, v)


def _same(indices: np.ndarray) -> np.ndarray:
    return indices


def _through(rows: Rows, indices: Any) -> Rows:
    """A Subset's dataset: the loader's indices through the Subset's own."""
    if rows is None:
        return None
    if indices is None:
        return rows
    picked = np.asarray(indices).reshape(-1)
    return lambda i: _pick(picked, rows(i))


def _pick(picked: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``picked[rows]``, -1 where a row is none of its (-1 already, or past its end)."""
    if not len(picked):
        return np.full(len(rows), -1)
    inside = (rows >= 0) & (rows < len(picked))
    return np.where(inside, picked[np.where(inside, rows, 0)], -1)


def _part(rows: Rows, starts: list[int], j: int) -> Rows:
    """The j-th dataset of a ConcatDataset (starting at ``starts[j]``)."""
    if rows is None:
        return None
    start, end = starts[j], starts[j + 1]
    return lambda i: np.where((rows(i) >= start) & (rows(i) < end), rows(i) - start, -1)


def _of(rows: Rows, dataset: Any, array: Any) -> Rows:
    """``rows`` where ``array`` holds a row for each example of ``dataset`` (or more: a series
    cut into windows, each starting at its index), else None."""
    try:
        return rows if len(array) >= len(dataset) else None
    except TypeError:  # a dataset without a length
        return None


class Held:
    """A list a dataset holds, as that dataset's attribute (a list takes no weak reference):
    called, the list while the dataset lives and still holds it, else None."""

    def __init__(self, holder: Any, attr: str):
        self.holder, self.attr = weakref.ref(holder), attr

    def __call__(self) -> list[Any] | None:
        holder = self.holder()
        value = vars(holder).get(self.attr) if holder is not None else None
        return value if isinstance(value, list) else None


def _floating(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return (
            value.is_floating_point()
            and not value.requires_grad
            and value.numel() >= SMALLEST
            and checks.dense(value)
        )
    if isinstance(value, np.ndarray):
        return np.issubdtype(value.dtype, np.floating) and value.size >= SMALLEST
    return False


def _item_column(items: list[Any]) -> int | None:
    """How a list holds per-example arrays: None for the items themselves, the index of the
    array in each item's tuple (``(x, label)``), -1 where it holds none."""
    first = items[0]
    if isinstance(first, torch.Tensor | np.ndarray):
        return None if _element(first) else -1
    if isinstance(first, tuple | list):
        for j, v in enumerate(first[:4]):
            if isinstance(v, torch.Tensor | np.ndarray) and _element(v):
                return j
    return -1


def _element(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and not value.requires_grad and checks.dense(value)
    return isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating)


def _source(array: Any, name: str, where: str, manual: bool) -> Source | None:
    rng = np.random.default_rng(0)
    if isinstance(array, Held):
        held, array = array, array()
        column = _item_column(array)
        assert column != -1
        chosen = rng.choice(len(array), min(ITEMS, len(array)), replace=False)
        items = []
        for i in sorted(chosen.tolist()):
            item = array[i] if column is None else array[i][column]
            n = int(item.numel() if isinstance(item, torch.Tensor) else item.size)
            if n:
                items.append((i, column, np.unique(rng.integers(0, n, min(ITEM_POSITIONS, n)))))
        first = array[0] if column is None else array[0][column]
        size = int(first.numel() if isinstance(first, torch.Tensor) else first.size)
        if sum(len(p) for _, _, p in items) < SMALLEST // 4:
            return None
        row_of = np.concatenate([np.full(len(p), i) for i, _, p in items])
        return Source(held, name, size, where, manual, items=items, row_of=row_of)
    n = int(array.numel() if isinstance(array, torch.Tensor) else array.size)
    shape = tuple(array.shape)
    if not shape or n < SMALLEST:
        return None
    flat = np.unique(rng.integers(0, n, min(POSITIONS, n)))
    index: Any = np.unravel_index(flat, shape)
    if isinstance(array, torch.Tensor):
        index = tuple(torch.as_tensor(i, device=array.device) for i in index)
    row_of = flat // max(n // shape[0], 1)
    return Source(
        weakref.ref(array), name, n // shape[0], where, manual, index=index, row_of=row_of
    )


def _as_read(source: Source) -> bool:
    """The rows batches drew changed as they were read, more than the others (``DRAWN``)."""
    (seen, changed), (others, other_changed) = source.drawn, source.others
    if seen < DRAWN:
        return False
    share, other = changed / seen, other_changed / max(others, 1)
    return share >= other + AS_READ and share >= ABOVE * other


def _covered(x: torch.Tensor, base: torch.Tensor) -> np.ndarray | None:
    """The rows of ``base`` that its view ``x`` covers (a slice X[i:i + bs], a chunk), or None
    where its rows are not laid out one after another."""
    if base.dim() == 0 or base.stride(0) <= 0 or not base.is_contiguous():
        return None
    row = base.stride(0)
    start = (x.storage_offset() - base.storage_offset()) // row
    span = sum((n - 1) * st for n, st in zip(x.shape, x.stride(), strict=True) if n > 0)
    return np.arange(start, start + span // row + 1)


def _values(source: Source) -> np.ndarray | None:
    """The values at the source's positions, as float64 (one host read), or None where the
    array is gone or no longer has them."""
    array = source.ref()
    if array is None:
        return None
    try:
        if source.index is not None:
            return _read(array, source.index)
        parts = []
        for i, column, positions in source.items:
            item = array[i] if column is None else array[i][column]
            flat = item.detach().reshape(-1) if isinstance(item, torch.Tensor) else item.ravel()
            if len(flat) <= positions[-1]:
                parts.append(np.full(len(positions), np.nan))
            else:
                parts.append(_read(flat, (positions,)))
        return np.concatenate(parts)
    except (IndexError, RuntimeError, TypeError, ValueError):  # reshaped, resized, replaced
        return None


def _read(array: Any, index: tuple[Any, ...]) -> np.ndarray:
    if isinstance(array, torch.Tensor):
        if isinstance(index[0], np.ndarray):
            index = tuple(torch.as_tensor(i, device=array.device) for i in index)
        with torch.no_grad():
            return array.detach()[index].double().cpu().numpy()
    return np.asarray(array[index], dtype=np.float64)


def _moved(first: np.ndarray, after: np.ndarray, now: np.ndarray) -> dict[str, float] | None:
    """How values transformed twice or more moved on after their first transform: their RMS
    (first read, after the first transform, now) where it changed again by ``DRIFT`` or more,
    or their distances from the first read where the latest is ``FARTHER`` times the first's;
    None where neither (new draws of an augmentation of clean data keep both)."""

    def rms(a: np.ndarray) -> float:
        with np.errstate(over="ignore", invalid="ignore"):
            value = float(np.sqrt(np.mean(np.square(a))))
        return value if not math.isnan(value) else math.inf

    r0, r1, r2 = rms(first), rms(after), rms(now)
    d1, d2 = rms(after - first), rms(now - first)
    moved = {"rms_first": r0, "rms_after_one": r1, "rms_now": r2, "distance": d1, "farther": d2}
    if not math.isfinite(r2):
        return moved
    if r1 > 0 and r2 > 0 and abs(math.log(r2 / r1)) >= math.log(DRIFT):
        return moved
    if d1 > 0 and d2 >= FARTHER * d1:
        return moved
    return None


def dataset_changed_in_place(
    name: str, manual: bool, repeated: int, read: int, found: dict[str, float]
) -> Finding:
    """``name`` changed in place pass after pass: ``repeated`` of ``read`` values read of it
    transformed twice or more, moving on each time, or (``found["value"]``) more of them set to
    one value each time."""
    how = (
        "the loop changes its batches in place (xb /= 255, xb -= mean, xb += noise on a slice "
        "X[i:i + bs], or a forward adding to its input), and a slice is a view: X changes"
        if manual
        else "__getitem__ (or a transform it calls) changes the stored example in place "
        "(x = self.data[i] is a view; x -= mean, x /= 255, x.add_(noise), x[..., a:b] = 0 "
        "write into it)"
    )
    if "value" in found:
        what = (
            f"{int(found['grew'])} more of the {read} values read of it hold "
            f"{_g(found['value'])} than at first, set so on {int(found['fills'])} passes "
            "(erased patches piling up)"
        )
    else:
        what = (
            f"{repeated} of {read} values read of it were transformed again on a later pass, "
            f"their RMS {_g(found['rms_first'])} at first, {_g(found['rms_after_one'])} after "
            f"one transform, {_g(found['rms_now'])} now"
        )
    return Finding(
        "dataset-changed-in-place",
        "error",
        f"{name} is changed in place by its own reading: {what}; {how}, so each pass reads "
        "the data transformed once more",
        evidence={
            "array": name,
            "sliced_by_hand": manual,
            "values_read": read,
            "values_transformed_again": repeated,
            **{k: _g(v) for k, v in found.items()},
        },
    )


def _g(value: float) -> float | str:
    return float(f"{value:.4g}") if math.isfinite(value) else str(value)
