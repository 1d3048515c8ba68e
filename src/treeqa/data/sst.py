"""Stanford Sentiment Treebank: splits, fine-grained (5-way) and binary views.

Binary view (Socher et al. 2013): labels 0-1 negative, 3-4 positive, neutral (2) ignored at
every node; sentences whose root is neutral are dropped.

``binary3`` is the binary task as Tai et al.'s code trains it (util/read_data.lua,
remap_labels): the same sentences, but every node keeps a label, negative / neutral /
positive (0 / 1 / 2), and a prediction is negative vs positive (neutral never wins). It is
scored exactly like ``binary``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from treeqa.data.tree import UNLABELLED, Tree, line_text, read_trees

SPLITS = ("train", "dev", "test")
TASKS = {"fine": 5, "binary": 2, "binary3": 3}
"""Task -> number of classes the model outputs."""
CLASSES = {
    "fine": ("very negative", "negative", "neutral", "positive", "very positive"),
    "binary": ("negative", "positive"),
    "binary3": ("negative", "neutral", "positive"),
}
"""Task -> what each class its models output (their probabilities, in order) means."""
PREDICTED = {
    "fine": dict(enumerate(CLASSES["fine"])),
    "binary": dict(enumerate(CLASSES["binary"])),
    # Three classes trained; a label is negative or positive, as the task is scored.
    "binary3": {k: CLASSES["binary3"][k] for k in (0, 2)},
}
"""Task -> the labels its models predict, and what each means."""
_BINARY = np.array([0, 0, UNLABELLED, 1, 1], dtype=np.int64)
_BINARY3 = np.array([0, 0, 1, 2, 2], dtype=np.int64)


def scored_as(task: str) -> str:
    """The accuracies that judge a task: binary3 is a binary task."""
    return "binary" if task == "binary3" else task


def legend(task: str) -> str:
    """What ``task``'s numbers mean: every class of the probabilities and, for a task whose
    label is chosen among some of them (binary3), which, and that the others never win."""
    classes = ", ".join(f"{k} {name}" for k, name in enumerate(CLASSES[task]))
    predicted = PREDICTED[task]
    if len(predicted) == len(CLASSES[task]):
        return f"labels ({task}): {classes}"
    left_out = [name for k, name in enumerate(CLASSES[task]) if k not in predicted]
    return (
        f"labels ({task}): {classes}; the label is {' or '.join(map(str, predicted))}, "
        f"whichever is more probable ({', '.join(left_out)} is trained on but never "
        f"predicted: the task is scored as {scored_as(task)})"
    )


def split_path(data_dir: str | Path, split: str) -> Path:
    """``split``.txt (PTB brackets) or ``split``.jsonl (dependency trees) in ``data_dir``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if Path(data_dir).is_file():  # else "train.txt/train.txt: no such file"
        raise NotADirectoryError(
            f"{data_dir} is a file; the data path names the folder of train/dev/test.txt "
            "(or .jsonl)"
        )
    for path in (Path(data_dir) / f"{split}{x}" for x in (".txt", ".jsonl")):
        if path.is_dir():  # else "no such SST split file", with the name right there
            raise IsADirectoryError(f"{path} is a directory, not a file of {split} trees")
    found = [Path(data_dir) / f"{s}{x}" for s in SPLITS for x in (".txt", ".jsonl")]
    found = [p for p in found if p.is_file()]
    if not found and Path(data_dir).suffix in (".txt", ".jsonl"):  # meant as a tree file
        raise IsADirectoryError(
            f"{data_dir} is a directory, not a tree file, and holds no train/dev/test.txt "
            "(or .jsonl)"
        )
    if len({p.suffix for p in found}) > 1:  # else some splits constituency trees, some not
        raise ValueError(
            f"{data_dir} holds PTB trees (.txt) and dependency trees (.jsonl): "
            f"{', '.join(p.name for p in found)}; a data folder holds one kind"
        )
    for path in found:
        if path.stem == split:
            return path
    # The kind of file the folder holds: a dependency folder's missing test is test.jsonl.
    suffix = found[0].suffix if found else ".txt"
    held = f"; the folder holds {', '.join(p.name for p in found)}" if found else ""
    raise FileNotFoundError(
        f"{Path(data_dir) / split}{suffix}: no such SST split file, so no {split} split{held} "
        "(expected train/dev/test.txt, or .jsonl from `treeqa data prepare sst-dependency`)"
    )


def load_split(data_dir: str | Path, split: str) -> list[Tree]:
    return read_tree_file(split_path(data_dir, split))


def tree_lines(path: str | Path) -> list[int]:
    """The line number (from 1) of each tree ``read_tree_file`` reads from ``path``."""
    path = Path(path)
    with path.open(encoding="utf-8", newline="") as f:
        if path.suffix == ".jsonl":  # as read_dependency_trees reads it
            return [n for n, line in enumerate(f, 1) if line.strip()]
        return [n for n, line in enumerate(f, 1) if line_text(line, n)]


def read_tree_file(path: str | Path) -> list[Tree]:
    """PTB brackets, or dependency trees from a ``.jsonl`` file."""
    if Path(path).suffix == ".jsonl":
        from treeqa.data.dependency import read_dependency_trees

        return list(read_dependency_trees(path))
    return read_trees(path)


def targets(labels: np.ndarray, task: str) -> np.ndarray:
    """Training targets for a task: fine labels as they are, binary with neutral -> -1, or
    binary3 with negative / neutral / positive -> 0 / 1 / 2."""
    if task == "fine":
        return labels
    if task in ("binary", "binary3"):
        out = np.full_like(labels, UNLABELLED)
        known = labels != UNLABELLED
        out[known] = (_BINARY if task == "binary" else _BINARY3)[labels[known]]
        return out
    raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")


def task_view(trees: list[Tree], task: str) -> list[Tree]:
    """The trees a task trains and evaluates on (binary drops neutral-rooted sentences)."""
    if scored_as(task) == "binary":
        return [t for t in trees if t.label != 2]
    targets(trees[0].labels if trees else np.zeros(0, np.int64), task)  # validates the name
    return trees


@dataclass(frozen=True)
class Stats:
    trees: int
    nodes: int
    tokens: int
    labels: dict[str, int]
    """Nodes per label, "unlabelled" for nodes without one."""
    root_labels: dict[str, int]
    height_mean: float
    height_max: int

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _named(counts: Counter[int]) -> dict[str, int]:
    return {("unlabelled" if k == UNLABELLED else str(k)): v for k, v in sorted(counts.items())}


def stats(trees: list[Tree]) -> Stats:
    labels: Counter[int] = Counter()
    for t in trees:
        labels.update(int(x) for x in t.labels)
    heights = np.array([t.height[0] for t in trees]) if trees else np.zeros(1)
    return Stats(
        trees=len(trees),
        nodes=sum(len(t) for t in trees),
        tokens=sum(len(t.tokens) for t in trees),
        labels=_named(labels),
        root_labels=_named(Counter(t.label for t in trees)),
        height_mean=float(heights.mean()),
        height_max=int(heights.max()),
    )
