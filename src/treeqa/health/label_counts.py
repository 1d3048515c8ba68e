"""The labels of a training set as it stands, each example once (``class-balanced-twice``).

A data pipeline that balances the classes draws the rare ones more often than the data holds
them: a ``WeightedRandomSampler``, a ``Subset`` whose indices repeat the rare examples, a
``ConcatDataset`` of the rare part's copies, a batch sampler of its own. The batches' classes
then say nothing of the data's; this reads the data's, where the dataset holds its labels
where they can be found without drawing an example:

- a ``TensorDataset`` of two tensors or more: the last, of one label a row (integers) or of
  0/1 targets (one column or several);
- an attribute ``targets``, ``labels``, ``label``, ``target`` or ``y`` in the dataset's own
  ``__dict__`` (a tensor, a NumPy array or a list, one entry an example; properties are not
  run), or such a key of a dict of columns it holds; a list of examples it holds (or is), the
  last of each tuple (torchvision's folders keep ``samples`` as ``(path, class)``) or such a
  key of each dict, where they are whole numbers; the dataset it wraps (an attribute that is a
  dataset of as many examples: a transform's wrapper);
- a ``Subset``: its dataset's labels at its indices; a ``ConcatDataset``: its datasets'
  labels, one after the other; each example once however often they hold it (a ``Subset`` of
  the rare examples concatenated to the whole, eight times, adds none).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.utils.data import ConcatDataset, Dataset, Subset, TensorDataset

NAMES = ("targets", "labels", "label", "target", "y")
"""Attributes of a dataset that hold its labels."""
DEPTH = 4
"""Subsets and concatenations looked through, at most."""


def labels(dataset: Any) -> torch.Tensor | None:
    """``dataset``'s labels, one row an example, each example once; None where not found."""
    found = _rows(dataset, {}, 0)
    if found is None or not len(found[0]):
        return None
    held, keys = found
    unique, first = torch.unique(keys, return_inverse=True)
    once = torch.full((len(unique),), len(keys), dtype=torch.long)
    once.scatter_reduce_(0, first, torch.arange(len(keys)), "amin")  # each key's first row
    return held[once]


def _rows(
    dataset: Any, roots: dict[int, int], depth: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``dataset``'s labels as it holds them (repeats and all) and a key for each row: the
    example it is (its dataset of labels, numbered in ``roots``, and its index there)."""
    if depth > DEPTH:
        return None
    if isinstance(dataset, Subset):
        inner = _rows(dataset.dataset, roots, depth + 1)
        if inner is None:
            return None
        indices = torch.as_tensor(dataset.indices, dtype=torch.long).reshape(-1)
        return inner[0][indices], inner[1][indices]
    if isinstance(dataset, ConcatDataset):
        parts = [_rows(part, roots, depth + 1) for part in dataset.datasets]
        if not parts or any(p is None for p in parts):
            return None
        held = [p[0] for p in parts if p is not None]
        if len({(h.dtype, h.shape[1:]) for h in held}) != 1:
            return None
        return torch.cat(held), torch.cat([p[1] for p in parts if p is not None])
    try:
        count = len(dataset)
    except TypeError:
        return None
    if isinstance(dataset, TensorDataset):
        found = _labels(dataset.tensors[-1], count) if len(dataset.tensors) >= 2 else None
    elif isinstance(dataset, list | tuple):
        found = _from_items(dataset, count)
    else:
        attributes = getattr(dataset, "__dict__", {})
        found = _held(attributes, count)
        if found is None:  # a dataset that wraps another (a transform's): the one it wraps
            inner = next((v for v in attributes.values() if _wrapped(v, count)), None)
            return None if inner is None else _rows(inner, roots, depth + 1)
    if found is None:
        return None
    root = roots.setdefault(id(dataset), len(roots))
    return found.cpu(), torch.arange(count) + (root << 40)


def _held(attributes: dict[str, Any], count: int) -> torch.Tensor | None:
    """The labels a dataset's own attributes hold: under a label's name; in a dict of columns
    under one; the last of each (x, y) pair of a list of examples (``samples``, as
    torchvision's folders keep them)."""
    for name in NAMES:
        found = _labels(attributes.get(name), count)
        if found is not None:
            return found
    for value in attributes.values():
        if isinstance(value, dict):
            found = next((_labels(value[n], count) for n in NAMES if n in value), None)
        elif isinstance(value, list | tuple) and len(value) == count:
            found = _from_items(value, count)
        else:
            continue
        if found is not None:
            return found
    return None


def _from_items(items: list[Any] | tuple[Any, ...], count: int) -> torch.Tensor | None:
    """The labels of a list of examples: the last of each tuple, or a label's key of each
    dict, where they are whole numbers (one pass over the list, once)."""
    if len(items) != count or not count:
        return None
    first = items[0]
    if isinstance(first, dict):
        name = next((n for n in NAMES if n in first), None)
        if name is None:
            return None
        picked = [item.get(name) if isinstance(item, dict) else None for item in items]
    elif isinstance(first, tuple | list) and len(first) >= 2:
        picked = [item[-1] if isinstance(item, tuple | list) and item else None for item in items]
    else:
        return None
    try:
        found = torch.as_tensor([operator.index(v) for v in picked])  # type: ignore[arg-type]
    except TypeError:
        return None
    return found


def _wrapped(value: Any, count: int) -> bool:
    """Whether ``value`` is a dataset of ``count`` examples (what a wrapper reads from)."""
    if not isinstance(value, Dataset):
        return False
    try:
        return len(value) == count  # type: ignore[arg-type]
    except TypeError:
        return False


def _labels(value: Any, count: int) -> torch.Tensor | None:
    """``value`` as labels of ``count`` examples: integers, one a row, or 0/1 targets."""
    if value is None or isinstance(value, str | bytes | dict):
        return None
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            return None
    if value.dim() == 0 or len(value) != count or value.is_complex():
        return None
    if not value.is_floating_point():
        return value.detach().reshape(-1) if value.dim() == 1 or value[0].numel() == 1 else None
    # (integer labels of two classes are read as 0/1 targets too, by the binary loss's check)
    if value.dim() > 2:
        return None
    binary = bool(((value == 0) | (value == 1)).all())  # (one read of the whole set, once)
    return value.detach() if binary else None
