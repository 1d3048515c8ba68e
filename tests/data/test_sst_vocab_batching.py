import re
from pathlib import Path

import numpy as np
import pytest
import torch

from treeqa.data import sst
from treeqa.data.batching import batches, collate, encode
from treeqa.data.tree import parse_tree
from treeqa.data.vocab import Vocab

TREES = [
    parse_tree("(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 good)) (2 .)))"),
    parse_tree("(1 (2 a) (0 (1 not) (2 (3 fun) (2 film))))"),
    parse_tree("(2 (2 ok))"),
]


def test_binary_view_drops_neutral() -> None:
    labels = np.array([0, 1, 2, 3, 4, -1])
    assert list(sst.targets(labels, "binary")) == [0, 0, -1, 1, 1, -1]
    assert list(sst.targets(labels, "fine")) == list(labels)
    assert [t.label for t in sst.task_view(TREES, "binary")] == [3, 1]
    # binary3 (Tai et al.'s binary training): the same sentences, every node keeps a label.
    assert list(sst.targets(labels, "binary3")) == [0, 0, 1, 2, 2, -1]
    assert [t.label for t in sst.task_view(TREES, "binary3")] == [3, 1]
    assert sst.TASKS["binary3"] == 3 and sst.scored_as("binary3") == "binary"
    with pytest.raises(ValueError, match="task must be"):
        sst.targets(labels, "ternary")


def test_split_path_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="train.txt"):
        sst.split_path(tmp_path, "train")
    with pytest.raises(ValueError, match="split must be"):
        sst.split_path(tmp_path, "valid")


def test_a_folder_mixing_bracketed_and_dependency_splits_is_refused(tmp_path: Path) -> None:
    # train.txt was taken beside dev.jsonl: the error came later, naming no file.
    (tmp_path / "train.txt").write_text("(3 (2 a) (4 good))\n", encoding="utf-8")
    (tmp_path / "dev.jsonl").write_text("{}\n", encoding="utf-8")
    for split in ("train", "dev", "test"):
        with pytest.raises(ValueError, match=r"\(\.jsonl\): train\.txt, dev\.jsonl; a data folder"):
            sst.split_path(tmp_path, split)


def test_a_split_file_given_for_the_folder_is_named(tmp_path: Path) -> None:
    # It was "train.txt/train.txt: no such SST split file".
    path = tmp_path / "train.txt"
    path.write_text("(3 (2 a) (4 good))\n", encoding="utf-8")
    with pytest.raises(NotADirectoryError, match=rf"^{re.escape(str(path))} is a file; .* folder"):
        sst.load_split(path, "train")


def test_a_folder_where_a_split_file_is_expected_is_named(tmp_path: Path) -> None:
    # It was "no such SST split file; the folder holds dev.txt", or, given the folder as the
    # data path, "train.txt/train.txt: no such SST split file".
    (tmp_path / "train.txt").mkdir()
    (tmp_path / "dev.txt").write_text("(3 (2 a) (4 good))\n", encoding="utf-8")
    where = re.escape(str(tmp_path / "train.txt"))
    with pytest.raises(IsADirectoryError, match=rf"^{where} is a directory, not a file of train"):
        sst.split_path(tmp_path, "train")
    assert sst.split_path(tmp_path, "dev") == tmp_path / "dev.txt"
    with pytest.raises(IsADirectoryError, match=rf"^{where} is a directory, not a tree file, and"):
        sst.split_path(tmp_path / "train.txt", "train")


def test_vocab_round_trip(tmp_path: Path) -> None:
    vocab = Vocab.build(["b", "a", "b", "c"], min_count=1)
    assert vocab.tokens == ("<pad>", "<unk>", "b", "a", "c")
    assert vocab.ids(["a", "zzz"]) == [3, 1]
    vocab.save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json") == vocab
    with pytest.raises(ValueError, match="starts with"):
        Vocab(("a", "b"))


def test_collate_concatenates_and_schedules_levels() -> None:
    vocab = Vocab.build(w for t in TREES for w in t.leaves)
    enc = [encode(t, vocab, "fine") for t in TREES]
    batch = collate(enc)
    n = sum(len(t) for t in TREES)
    assert batch.words.shape == (n,) and batch.child_index.shape == (n - len(TREES),)
    assert batch.roots.tolist() == [0, 9, 16]
    assert batch.parent[9 + 1].item() == 9  # second tree's first child points to its root
    # Every node appears in exactly one level, children always in an earlier level.
    seen = torch.cat(batch.levels).sort().values
    assert seen.tolist() == list(range(n))
    level_of = torch.empty(n, dtype=torch.long)
    for h, nodes in enumerate(batch.levels):
        level_of[nodes] = h
    for u in range(n):
        kids = batch.children(u)
        assert kids == [v for v in range(n) if batch.parent[v] == u]  # in order
        assert all(level_of[v] < level_of[u] for v in kids)
    assert batch.subtree_end[0].item() == 9 and batch.subtree_end[16].item() == 18
    assert batch.is_leaf.sum().item() == sum(len(t.leaves) for t in TREES)


def test_batches_order_depends_only_on_seed() -> None:
    vocab = Vocab.build(w for t in TREES for w in t.leaves)
    enc = [encode(t, vocab, "fine") for t in TREES] * 4
    first = [b.roots.numel() for b in batches(enc, 5, shuffle=True, seed=3)]
    assert first == [5, 5, 2]
    a = [b.words.tolist() for b in batches(enc, 5, shuffle=True, seed=3)]
    b = [b.words.tolist() for b in batches(enc, 5, shuffle=True, seed=3)]
    assert a == b
