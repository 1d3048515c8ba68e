"""Dependency-parsed SST: spaCy parses of the SST sentences with the SST labels projected.

Each sentence is parsed with its SST tokens kept (one sentence, whatever the parser would have
split), giving every token a POS tag, a head and a relation. A dependency node covers its
subtree's tokens; it takes the SST label of the constituent with the same token span, else no
label, and the root always takes the sentence label (as the published dependency SST does).

On disk: one JSON object per line, the sentence's tokens in order with
``{"tokens", "tags", "heads", "rels", "labels"}``, heads 0-based (-1 at the root), labels 0-4
or -1. In memory a ``DependencyTree`` holds the same nodes in pre-order (a head, then its
dependents' subtrees left to right), so every tree model and batch reads it like any ``Tree``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from treeqa.data.output_dir import built_aside, check_replaceable, real_folder
from treeqa.data.squad import import_spacy, json_beyond_syntax, unique_keys
from treeqa.data.tree import (
    MAX_LABEL,
    UNLABELLED,
    Tree,
    TreeSyntaxError,
    not_utf8,
    unescape_ptb,
)

FIELDS = ("tokens", "tags", "heads", "rels", "labels")
ROOT_REL = "ROOT"


@dataclass(frozen=True, eq=False)
class DependencyTree(Tree):
    """A dependency tree in pre-order: every node holds a word, its POS tag, its relation to
    its parent (``ROOT`` at the root) and its word's index in the sentence."""

    tags: tuple[str, ...]  # [N]
    rels: tuple[str, ...]  # [N]
    position: np.ndarray  # [N] int64, index of the node's word in the sentence

    @cached_property
    def tokens(self) -> list[str]:
        words = [""] * len(self)
        for node, pos in enumerate(self.position):
            words[pos] = self.words[node] or ""
        return words

    def phrase(self, i: int) -> str:
        span = range(i, i + int(self.size[i]))
        return " ".join(self.words[j] or "" for j in sorted(span, key=lambda j: self.position[j]))

    def to_record(self) -> dict[str, list[Any]]:
        """The sentence-order JSON record of this tree (``from_record`` reads it back)."""
        node_at = np.argsort(self.position)  # [N] sentence position -> node
        return {
            "tokens": self.tokens,
            "tags": [self.tags[n] for n in node_at],
            "heads": [
                int(self.position[self.parent[n]]) if self.parent[n] >= 0 else -1 for n in node_at
            ],
            "rels": [self.rels[n] for n in node_at],
            "labels": [int(self.labels[n]) for n in node_at],
        }


def from_record(record: Any, source: str = "<record>", line: int = 1) -> DependencyTree:
    """A sentence-order record -> the tree in pre-order; errors name ``source:line`` and field."""

    def fail(message: str) -> TreeSyntaxError:
        return TreeSyntaxError(message, source, line, 1)

    if not isinstance(record, dict):
        raise fail(f"expected a JSON object with {', '.join(FIELDS)}")
    missing = [k for k in FIELDS if k not in record]
    if missing:
        raise fail(f"missing field(s) {', '.join(repr(k) for k in missing)}")
    n = len(record["tokens"]) if isinstance(record["tokens"], list) else 0
    if n == 0:
        raise fail("field 'tokens' must be a non-empty list")
    for key in FIELDS:
        value = record[key]
        if not isinstance(value, list) or len(value) != n:
            raise fail(f"field {key!r} must be a list of {n} items, one per token")
        kind = int if key in ("heads", "labels") else str
        if not all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
            raise fail(f"field {key!r} must hold only {kind.__name__}s")
    if "" in record["tokens"]:  # as a bracketed tree's empty leaf is
        raise fail(f"field 'tokens': token {record['tokens'].index('')} is empty")
    heads, labels = record["heads"], record["labels"]
    roots = [i for i, h in enumerate(heads) if h == -1]
    if len(roots) != 1:
        raise fail(f"field 'heads': a tree has exactly one root (-1), found {len(roots)}")
    bad = [h for h in heads if not -1 <= h < n]
    if bad:
        raise fail(f"field 'heads': {bad[0]} is not a token index (0-{n - 1}) or -1")
    bad = [x for x in labels if not UNLABELLED <= x <= MAX_LABEL]
    if bad:
        raise fail(f"field 'labels': {bad[0]} is not in 0-{MAX_LABEL} or -1")
    dependents: list[list[int]] = [[] for _ in range(n)]
    for i, h in enumerate(heads):
        if h >= 0:
            dependents[h].append(i)  # in sentence order
    order: list[int] = []  # pre-order of sentence positions
    parent: list[int] = []
    stack = [(roots[0], -1)]  # each token is pushed once, by its head: no endless loop
    while stack:
        pos, parent_node = stack.pop()
        parent.append(parent_node)
        order.append(pos)
        stack.extend((d, len(order) - 1) for d in reversed(dependents[pos]))
    if len(order) != n:  # a cycle is never reached from the root
        raise fail("field 'heads': not a tree (a cycle, or tokens not reachable from the root)")
    return DependencyTree(
        parent=np.asarray(parent, dtype=np.int64),
        labels=np.asarray([labels[p] for p in order], dtype=np.int64),
        words=tuple(record["tokens"][p] for p in order),
        tags=tuple(record["tags"][p] for p in order),
        rels=tuple(record["rels"][p] for p in order),
        position=np.asarray(order, dtype=np.int64),
    )


def read_dependency_trees(path: str | Path) -> list[DependencyTree]:
    """Every tree of a dependency JSONL file; errors name ``path:line``."""
    path = Path(path)
    trees = []
    try:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                # A byte-order mark some editors write, as the bracket reader takes it; the
                # line break cut, so an error at the line's end has its column, not the next's.
                text = (line.removeprefix("\ufeff") if number == 1 else line).rstrip("\r\n")
                if not text.strip():
                    continue
                try:
                    record = json.loads(text, object_pairs_hook=unique_keys)
                except json.JSONDecodeError as err:
                    raise TreeSyntaxError(
                        f"invalid JSON: {err.msg}", str(path), number, err.colno
                    ) from err
                except (RecursionError, ValueError) as err:  # 100,000 "[" in a row, say
                    raise TreeSyntaxError(json_beyond_syntax(err), str(path), number, 1) from None
                except KeyError as err:  # unique_keys: the last value would win, silently
                    key = json.dumps(err.args[0], ensure_ascii=False)
                    column = text.find(key, text.find(key) + 1) + 1  # its second place
                    raise TreeSyntaxError(
                        f"field {err.args[0]!r} is given twice", str(path), number, max(column, 1)
                    ) from err
                trees.append(from_record(record, str(path), number))
    except UnicodeDecodeError as err:
        raise not_utf8(path, err) from err
    return trees


def write_dependency_trees(trees: Iterable[DependencyTree], path: str | Path) -> None:
    """Write to a temporary file, then rename: a killed run never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for tree in trees:
            f.write(json.dumps(tree.to_record(), ensure_ascii=False) + "\n")
    tmp.replace(path)


def constituent_labels(tree: Tree) -> dict[tuple[int, int], int]:
    """(first token, last token) -> label of the highest labelled constituent with that span."""
    is_leaf = np.array([w is not None for w in tree.words])
    leaf_index = np.cumsum(is_leaf) - 1  # [N] index of the leaf at or before each node
    spans: dict[tuple[int, int], int] = {}
    for i in range(len(tree)):
        first = int(leaf_index[i]) + (0 if is_leaf[i] else 1)  # an inner node's leaves follow it
        last = int(leaf_index[i + int(tree.size[i]) - 1])  # its subtree ends with its last leaf
        if tree.labels[i] != UNLABELLED:
            spans.setdefault((first, last), int(tree.labels[i]))
    return spans


def project_labels(tree: Tree, heads: Sequence[int]) -> list[int]:
    """SST labels onto the dependency nodes of the same sentence (sentence order): a node whose
    subtree's tokens are exactly a constituent's takes its label; the root the sentence's."""
    n = len(heads)
    spans = constituent_labels(tree)
    low, high, count = list(range(n)), list(range(n)), [1] * n
    for i in range(n):  # every token widens the spans of all its ancestors
        h, seen = heads[i], 0
        while h >= 0 and seen < n:
            low[h], high[h] = min(low[h], i), max(high[h], i)
            count[h] += 1
            h, seen = heads[h], seen + 1
    labels = [
        spans.get((low[i], high[i]), UNLABELLED) if high[i] - low[i] + 1 == count[i] else UNLABELLED
        for i in range(n)
    ]
    labels[list(heads).index(-1)] = tree.label
    return labels


@functools.cache
def load_parser(name: str) -> Any:
    """A trained spaCy pipeline with only what parsing needs (tagger, parser), loaded once."""
    spacy = import_spacy(
        "dependency parsing needs spaCy and a trained English pipeline: "
        "pip install 'treeqa[qa]' && python -m spacy download en_core_web_sm"
    )
    try:
        return spacy.load(name, exclude=["ner", "lemmatizer", "senter"])
    except OSError as err:
        raise OSError(
            f"spaCy pipeline {name!r} is not installed (python -m spacy download {name})"
        ) from err


def parse(nlp: Any, sentences: Iterable[Sequence[str]], batch_size: int = 256) -> Iterator[Any]:
    """spaCy Docs of pre-tokenised sentences (PTB escapes undone for the parser), each kept as
    one sentence: the parser may not split it."""
    from spacy.tokens import Doc

    def docs() -> Iterator[Any]:
        for tokens in sentences:
            doc = Doc(nlp.vocab, words=[unescape_ptb(t) for t in tokens])
            for i, token in enumerate(doc):
                token.is_sent_start = i == 0
            yield doc

    return nlp.pipe(docs(), batch_size=batch_size)


def parsed_record(doc: Any, tokens: Sequence[str], labels: Sequence[int]) -> dict[str, Any]:
    """A Doc (one sentence) -> the JSON record, tokens as given (e.g. PTB-escaped)."""
    return {
        "tokens": list(tokens),
        "tags": [t.tag_ for t in doc],
        "heads": [-1 if t.head.i == t.i else t.head.i for t in doc],
        "rels": [ROOT_REL if t.head.i == t.i else t.dep_ for t in doc],
        "labels": list(labels),
    }


def parse_text(nlp: Any, text: str) -> list[DependencyTree]:
    """Raw text -> one unlabelled tree per sentence, tokens PTB-escaped as SST's are."""
    from treeqa.data.squad import visible
    from treeqa.data.tree import escape_ptb

    trees = []
    for sent in nlp(text).sents:  # the first parse only splits sentences
        # (a token of zero-width or control characters alone is no word: SST has none)
        words = [t.text for t in sent if not t.is_space and visible(t.text)]
        if not words:
            continue
        doc = next(parse(nlp, [words]))  # each parsed alone, as the SST sentences were
        tokens = [escape_ptb(w) for w in words]
        trees.append(from_record(parsed_record(doc, tokens, [UNLABELLED] * len(words))))
    return trees


def convert_sst(
    sst_dir: str | Path,
    out: str | Path,
    pipeline: str,
    log: Any = print,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Parse SST's three splits into ``out/{train,dev,test}.jsonl`` plus ``meta.json`` (a folder
    without test.txt gives train and dev alone, which train as well).

    The files are written to a folder beside ``out`` and renamed into place at the end, so a
    failure (a malformed tree in the test split, say) leaves an earlier ``out`` as it was.
    """
    from treeqa.data import sst

    out = real_folder(Path(out))  # a link to a folder writes there
    check_replaceable(
        out,
        overwrite,
        lambda meta: "pipeline" in meta,
        "data prepare sst-dependency",
        written=["meta.json", *(f"{split}.jsonl" for split in sst.SPLITS)],
        inputs=[Path(sst_dir)],
    )
    if Path(sst_dir).is_file():
        raise ValueError(f"--sst {sst_dir} is a file; it names SST's folder of train/dev/test.txt")
    splits = {}
    for split in sst.SPLITS:  # every split read and checked before the long parse
        path = Path(sst_dir) / f"{split}.txt"
        if not path.is_file():
            jsonl = path.with_suffix(".jsonl")
            if split == "test" and not jsonl.is_file():
                continue
            raise FileNotFoundError(
                f"{jsonl}: dependency trees already; --sst takes SST's bracketed {path.name}"
                if jsonl.is_file()
                else f"{path}: no such SST split file (--sst takes SST's train/dev/test.txt)"
            )
        splits[split] = sst.read_tree_file(path)
    nlp = load_parser(pipeline)
    meta: dict[str, Any] = {
        "pipeline": pipeline,
        "pipeline_version": nlp.meta.get("version", ""),
        "splits": {},
    }
    with built_aside(out) as work:
        for split, trees in splits.items():
            dep = []
            for i, (tree, doc) in enumerate(
                zip(trees, parse(nlp, (t.tokens for t in trees)), strict=True)
            ):
                record = parsed_record(doc, tree.tokens, [UNLABELLED] * len(doc))
                record["labels"] = project_labels(tree, record["heads"])
                dep.append(from_record(record, f"{split} sentence", i + 1))
            write_dependency_trees(dep, work / f"{split}.jsonl")
            nodes = sum(len(t) for t in dep)
            labelled = sum(int((t.labels != UNLABELLED).sum()) for t in dep)
            meta["splits"][split] = {"sentences": len(dep), "nodes": nodes, "labelled": labelled}
            log(f"{split}: {len(dep):,} sentences, {labelled:,} of {nodes:,} nodes labelled")
        (work / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta
