"""Forests of trees as one batch, with the level schedule the tree models run on.

Shape letters: B trees in the batch, N nodes in the forest (trees concatenated, each in
pre-order), E = N - B child links (every node but a root is one node's child), H levels
(heights). Children are held packed, as a sparse matrix's rows are (CSR): a node with 5,000
children costs 5,000 entries, not a [N, 5,000] table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from treeqa.data.collated import Collated
from treeqa.data.dependency import DependencyTree
from treeqa.data.sst import targets as task_targets
from treeqa.data.tree import Tree
from treeqa.data.vocab import Vocab


@dataclass(frozen=True)
class EncodedTree:
    """One tree as index arrays, computed once and reused every epoch (n nodes); its children
    are the nodes whose parent a node is, in index order (``data.tree``)."""

    words: np.ndarray  # [n] word id at leaves, 0 (padding) at inner nodes
    labels: np.ndarray  # [n] fine-grained label 0-4, -1 = none
    targets: np.ndarray  # [n] the task's target, -1 = ignored
    parent: np.ndarray  # [n] local parent index, -1 at the root
    height: np.ndarray  # [n] 0 at leaves
    size: np.ndarray  # [n] nodes in the subtree
    tags: np.ndarray | None = None  # [n] POS-tag id (dependency trees only)
    rels: np.ndarray | None = None  # [n] id of the relation to the parent (dependency trees only)


def encode(
    tree: Tree, vocab: Vocab, task: str, tags: Vocab | None = None, rels: Vocab | None = None
) -> EncodedTree:
    """Index arrays of one tree; ``tags``/``rels`` vocabularies encode a dependency tree's
    POS tags and relations (every node of a dependency tree holds a word)."""
    tag_ids = rel_ids = None
    if tags is not None or rels is not None:
        if not isinstance(tree, DependencyTree):
            raise ValueError("POS-tag and relation vocabularies need a dependency tree")
        tag_ids = None if tags is None else np.array(tags.ids(tree.tags), dtype=np.int64)
        rel_ids = None if rels is None else np.array(rels.ids(tree.rels), dtype=np.int64)
    words = np.array([0 if w is None else vocab.id(w) for w in tree.words], dtype=np.int64)
    return EncodedTree(
        words=words,
        labels=tree.labels,
        targets=task_targets(tree.labels, task),
        parent=tree.parent,
        height=tree.height,
        size=tree.size,
        tags=tag_ids,
        rels=rel_ids,
    )


@dataclass(frozen=True)
class TreeBatch:
    """A forest of B trees; every index refers to the concatenated node axis N."""

    words: torch.Tensor  # [N] int64
    is_leaf: torch.Tensor  # [N] bool
    labels: torch.Tensor  # [N] int64 fine labels, -1 = none
    targets: torch.Tensor  # [N] int64 task targets, -1 = ignored
    parent: torch.Tensor  # [N] int64, -1 at roots
    child_start: torch.Tensor  # [N + 1] int64: node i's children are child_index[s[i] : s[i + 1]]
    child_index: torch.Tensor  # [E] int64 child node ids, grouped by parent, in order
    subtree_end: torch.Tensor  # [N] int64, node i's subtree is nodes [i, subtree_end[i])
    roots: torch.Tensor  # [B] int64
    levels: tuple[torch.Tensor, ...]  # H tensors of node indices, level h = nodes of height h
    # H tuples of host ints: level h's nodes that have more than i children, i = 0, 1, ... (its
    # nodes come most children first, so these are prefixes; like PackedSequence.batch_sizes)
    level_steps: tuple[tuple[int, ...], ...]
    tags: torch.Tensor | None = None  # [N] int64 POS-tag ids (dependency trees only)
    rels: torch.Tensor | None = None  # [N] int64 relation-to-parent ids (dependency trees only)

    @property
    def num_examples(self) -> int:
        return int(self.roots.numel())

    def children(self, node: int) -> list[int]:
        """The children of ``node`` in order (host ints; for tests and the reference)."""
        start, end = self.child_start[node : node + 2].tolist()
        return self.child_index[start:end].tolist()

    def to(self, device: torch.device | str) -> TreeBatch:
        moved: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                moved[f.name] = value.to(device, non_blocking=True)
            elif f.name == "levels":
                moved[f.name] = tuple(v.to(device, non_blocking=True) for v in value)
            else:  # None, or host-side ints
                moved[f.name] = value
        return TreeBatch(**moved)


def collate(trees: Sequence[EncodedTree]) -> TreeBatch:
    """Concatenate encoded trees into one forest and group its nodes by height."""
    sizes = np.array([len(t.words) for t in trees], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])  # [B]
    parent = np.concatenate(
        [np.where(t.parent >= 0, t.parent + o, -1) for t, o in zip(trees, offsets, strict=False)]
    )
    linked = np.flatnonzero(parent >= 0)  # [E] every node but the roots
    child_index = linked[np.argsort(parent[linked], kind="stable")]  # [E] by parent, in order
    counts = np.bincount(parent[linked], minlength=len(parent))  # [N] children of each node
    height = np.concatenate([t.height for t in trees])
    order = np.lexsort((-counts, height))  # by height, then most children first
    bounds = np.cumsum(np.bincount(height))[:-1]
    words = np.concatenate([t.words for t in trees])
    return TreeBatch(
        words=torch.from_numpy(words),
        is_leaf=torch.from_numpy(counts == 0),
        labels=torch.from_numpy(np.concatenate([t.labels for t in trees])),
        targets=torch.from_numpy(np.concatenate([t.targets for t in trees])),
        parent=torch.from_numpy(parent),
        child_start=torch.from_numpy(np.concatenate([[0], np.cumsum(counts)])),
        child_index=torch.from_numpy(child_index),
        subtree_end=torch.from_numpy(
            np.concatenate(
                [np.arange(len(t.size)) + t.size + o for t, o in zip(trees, offsets, strict=False)]
            )
        ),
        roots=torch.from_numpy(offsets),
        levels=tuple(torch.from_numpy(level) for level in np.split(order, bounds)),
        level_steps=tuple(_steps(c) for c in np.split(counts[order], bounds)),
        tags=_joined([t.tags for t in trees]),
        rels=_joined([t.rels for t in trees]),
    )


def _steps(counts: np.ndarray) -> tuple[int, ...]:
    """[L] children per node -> how many have more than i children, for i below the most."""
    more = np.cumsum(np.bincount(counts)[::-1])[::-1]  # [K + 1] nodes with >= j children
    return tuple(int(n) for n in more[1:])


def _joined(parts: Sequence[np.ndarray | None]) -> torch.Tensor | None:
    """One [N] tensor from every tree's array, or None when any tree lacks it."""
    if any(p is None for p in parts):
        return None
    return torch.from_numpy(np.concatenate(parts))  # type: ignore[arg-type]


def batches(
    trees: Sequence[EncodedTree], batch_size: int, shuffle: bool, seed: int = 0
) -> Collated[TreeBatch]:
    """Batches of ``batch_size`` trees, each collated when read; the order depends only on
    ``seed`` (resume-safe)."""
    order = (
        np.random.default_rng(seed).permutation(len(trees)) if shuffle else np.arange(len(trees))
    )
    groups = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    return Collated(groups, lambda group: collate([trees[i] for i in group]))
