"""A compact labelled tree and a strict PTB bracket reader/writer.

Nodes are stored in pre-order (the order of their opening brackets), so node 0 is the root,
a node's subtree is the contiguous range ``[i, i + size[i])`` and the children of a node are
the nodes whose parent it is, in increasing index order. N is the number of nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

UNLABELLED = -1
MAX_LABEL = 4

# PTB escapes in SST leaves, mapped back to the characters word vectors are keyed by.
PTB_ESCAPES = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LSB-": "[",
    "-RSB-": "]",
    "-LCB-": "{",
    "-RCB-": "}",
    "``": '"',
    "''": '"',
}


def unescape_ptb(token: str) -> str:
    """The plain form of a PTB-escaped token, for vector look-up (``\\/`` -> ``/``)."""
    token = PTB_ESCAPES.get(token, token)
    return token.replace("\\/", "/").replace("\\*", "*")


_ESCAPE = {plain: escaped for escaped, plain in PTB_ESCAPES.items() if escaped != "``"}


def escape_ptb(token: str) -> str:
    """A plain token as SST spells it (``(`` -> ``-LRB-``, ``/`` -> ``\\/``): raw text then
    finds the treebank's vocabulary."""
    return _ESCAPE.get(token) or token.replace("/", "\\/").replace("*", "\\*")


class TreeSyntaxError(ValueError):
    """A malformed bracketed tree, located by file, line and column (both 1-based)."""

    def __init__(self, message: str, source: str = "<string>", line: int = 1, column: int = 1):
        self.source, self.line, self.column, self.reason = source, line, column, message
        super().__init__(f"{source}:{line}:{column}: {message}")


@dataclass(frozen=True, eq=False)
class Tree:
    """A labelled ordered tree: ``parent[i]`` (-1 at the root), ``labels[i]`` (0-4, -1 =
    none), ``words[i]`` (the token at a leaf, None at an inner node), nodes in pre-order. One
    built by hand may give lists; a tree out of that shape is a ValueError naming the node."""

    parent: np.ndarray  # [N] int64
    labels: np.ndarray  # [N] int64
    words: tuple[str | None, ...]  # [N]

    def __post_init__(self) -> None:
        # A tree built by hand, not read: the batching, the writer and ``phrase`` rely on
        # pre-order, and a bad one would batch without error and print as other phrases.
        # Plain Python over lists: numpy's per-call cost would slow reading a treebank.
        n = len(self.words)
        parent = np.asarray(self.parent, dtype=np.int64)  # [N]; no copy for the reader's
        labels = np.asarray(self.labels, dtype=np.int64)  # [N]
        object.__setattr__(self, "parent", parent)
        object.__setattr__(self, "labels", labels)
        if n == 0 or parent.shape != (n,) or labels.shape != (n,):
            raise ValueError(
                f"Tree: parent {list(parent.shape)}, labels {list(labels.shape)} and words [{n}] "
                "need one entry per node, at least one node"
            )
        parents, values = parent.tolist(), labels.tolist()
        if not UNLABELLED <= min(values) <= max(values) <= MAX_LABEL:
            raise ValueError(
                f"Tree: labels are 0-{MAX_LABEL} (SST's scale) or {UNLABELLED} for none; got "
                f"{values}"
            )
        if parents[0] != -1:
            raise ValueError(f"Tree: parent[0] is -1 (node 0 is the root); got {parents}")
        path = [0]  # the open subtrees at node i - 1: its ancestors and itself
        for i in range(1, n):
            while path and path[-1] != parents[i]:
                path.pop()
            if not path:
                raise ValueError(
                    f"Tree: nodes are in pre-order (a subtree's nodes right after its root, "
                    f"node 0 the root), but node {i}'s parent, {parents[i]}, is not node "
                    f"{i - 1} or one of its ancestors; got parent {parents}"
                )
            path.append(i)
        inner = set(parents)
        leaf = next((i for i, w in enumerate(self.words) if w is None and i not in inner), None)
        if leaf is not None:
            raise ValueError(f"Tree: node {leaf} is a leaf with no word (words[{leaf}] is None)")

    def __len__(self) -> int:
        return len(self.words)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Tree)
            and self.words == other.words
            and np.array_equal(self.parent, other.parent)
            and np.array_equal(self.labels, other.labels)
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def label(self) -> int:
        return int(self.labels[0])

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in self.words]
        for i in range(1, len(self.words)):
            kids[int(self.parent[i])].append(i)
        return tuple(tuple(k) for k in kids)

    @cached_property
    def size(self) -> np.ndarray:
        """[N] number of nodes in each subtree (its own node included)."""
        size = np.ones(len(self), dtype=np.int64)
        for i in range(len(self) - 1, 0, -1):  # children come after their parent
            size[self.parent[i]] += size[i]
        return size

    @cached_property
    def height(self) -> np.ndarray:
        """[N] 0 at leaves, 1 + the highest child elsewhere."""
        height = np.zeros(len(self), dtype=np.int64)
        for i in range(len(self) - 1, 0, -1):
            p = self.parent[i]
            height[p] = max(height[p], height[i] + 1)
        return height

    @property
    def leaves(self) -> list[str]:
        return [w for w in self.words if w is not None]

    @property
    def tokens(self) -> list[str]:
        """The sentence's words in order (a constituency tree's leaves)."""
        return self.leaves

    def phrase(self, i: int) -> str:
        """The words of node i's subtree, in sentence order."""
        return " ".join(w for w in self.words[i : i + int(self.size[i])] if w is not None)

    def text(self) -> str:
        return " ".join(self.tokens)

    def to_ptb(self) -> str:
        """The bracketed form; ``parse_tree(t.to_ptb()) == t``. Written in one pass over the
        pre-order nodes, not by recursion, so any tree the reader takes is written back."""
        parts: list[str] = []
        ends: list[int] = []  # the subtree end of each open inner node, innermost last
        for i, word in enumerate(self.words):
            while ends and ends[-1] <= i:  # the subtrees that end before node i
                ends.pop()
                parts.append(")")
            if i and i != self.parent[i] + 1:  # not its parent's first child
                parts.append(" ")
            parts.append("(" if self.labels[i] == UNLABELLED else f"({self.labels[i]} ")
            if word is not None:
                parts.append(f"{word})")
            else:
                ends.append(i + int(self.size[i]))
        parts.append(")" * len(ends))
        return "".join(parts)


SPACE = " \t\r\n"
"""Between tokens: a tree's file is read line by line, but one given whole (to ``predict``, the
server's page) may be laid out over several lines."""
DELIMITERS = SPACE + "()"


def is_label(text: str) -> bool:
    # isascii: str.isdigit() also holds for "²" (int() refuses it) and "٣".
    return text.isascii() and text.isdigit() and int(text) <= MAX_LABEL


def parse_tree(text: str, source: str = "<string>", line: int = 1) -> Tree:
    """Parse one bracketed tree such as ``(3 (2 a) (4 good))``.

    Labels must be 0-4 (or absent); tokens are split on ASCII space, tab and line breaks only,
    so a U+00A0 inside a leaf stays part of its token. Errors name ``source:line:column``
    (``line`` that of the text's first line).
    """

    def fail(message: str, pos: int) -> TreeSyntaxError:
        below = text.count("\n", 0, pos)
        return TreeSyntaxError(message, source, line + below, pos - text.rfind("\n", 0, pos))

    parent: list[int] = []
    labels: list[int] = []
    words: list[str | None] = []
    stack: list[int] = []  # open nodes
    n_items: list[int] = []  # children or words seen inside each open node
    digit_leaf: tuple[int, str] | None = None  # the first "(2)" leaf under a labelled root
    pos, end = 0, len(text)
    while pos < end and text[pos] in SPACE:
        pos += 1
    if pos == end:
        raise fail("empty line: expected a tree", 0)
    if text[pos] != "(":
        raise fail(f"expected '(' at the start of a tree, found {text[pos]!r}", pos)
    while pos < end:
        ch = text[pos]
        if ch in SPACE:
            pos += 1
        elif ch == "(":
            if not stack and parent:
                raise fail("trailing text after the tree: a second tree on one line", pos)
            if stack and words[stack[-1]] is not None:
                raise fail("a leaf cannot also have children", pos)
            node = len(words)
            parent.append(stack[-1] if stack else -1)
            if stack:
                n_items[stack[-1]] += 1
            words.append(None)
            stack.append(node)
            n_items.append(0)
            pos += 1
            start = pos
            while pos < end and text[pos] not in DELIMITERS:
                pos += 1
            label = text[start:pos]
            after = pos  # the next token's start
            while after < end and text[after] in SPACE:
                after += 1
            if label and after == end:  # "((the) (film": cut off, not a bad label
                raise fail(
                    f"unbalanced '(': {len(stack)} bracket(s) left open at the end of the tree",
                    end,
                )
            # "(word)" or, as "( word)" is, "(word )": an unlabelled leaf ("(2 )": a label).
            if label and text[after] == ")" and (after == pos or not is_label(label)):
                if labels and labels[0] != UNLABELLED and is_label(label) and not digit_leaf:
                    digit_leaf = start - 1, label  # judged once the other leaves are read
                labels.append(UNLABELLED)
                words[node] = label
                n_items[node] += 1
            elif not label:
                labels.append(UNLABELLED)
            elif is_label(label):
                labels.append(int(label))
            elif text[after] not in DELIMITERS:  # "(the film)": two words, or a bad label
                word = text[after:].split(None, 1)[0].split(")", 1)[0].split("(", 1)[0]
                raise fail(
                    f"label {label!r} is not an integer in 0-{MAX_LABEL}; as words, each goes "
                    f"in brackets of its own: '({label}) ({word})'",
                    start,
                )
            else:
                raise fail(f"label {label!r} is not an integer in 0-{MAX_LABEL}", start)
        elif ch == ")":
            if not stack:
                raise fail("unbalanced ')': no open bracket to close", pos)
            node = stack.pop()
            if n_items[node] == 0:
                raise fail("empty node: expected a word or a child before ')'", pos)
            pos += 1
        else:
            if not stack:
                raise fail(f"trailing text after the tree: {text[pos : pos + 20]!r}", pos)
            start = pos
            while pos < end and text[pos] not in DELIMITERS:
                pos += 1
            node = stack[-1]
            if n_items[node] > 0:
                word = text[start:pos]
                held = "word" if words[node] is not None else "children"
                # A no-break space or form feed looks like a space but is none: show it.
                why = "; only ASCII spaces, tabs and line breaks separate" if word.isspace() else ""
                raise fail(
                    "a node holds either one word or children, not both: found the word "
                    f"{word!r} after its {held}{why}",
                    start,
                )
            words[node] = text[start:pos]
            n_items[node] += 1
    if stack:
        raise fail(f"unbalanced '(': {len(stack)} bracket(s) left open at the end of the tree", end)
    # "(2 (2 this) (2))" lost a word where its other leaves are labelled; in a tree labelled
    # at the root alone, "(4 (rated) (3) (stars))", an unlabelled "(3)" is the word "3".
    if digit_leaf and any(words[i] is not None and y != UNLABELLED for i, y in enumerate(labels)):
        at, label = digit_leaf
        raise fail(
            f"'({label})' reads as the word {label!r} with no label, in a labelled "
            f"tree: a labelled leaf is '({label} word)'",
            at,
        )
    return Tree(
        parent=np.asarray(parent, dtype=np.int64),
        labels=np.asarray(labels, dtype=np.int64),
        words=tuple(words),
    )


def iter_trees(lines: Iterable[str], source: str = "<string>") -> Iterator[Tree]:
    """One tree per non-blank line."""
    for number, raw in enumerate(lines, start=1):
        if text := line_text(raw, number):
            try:
                tree = parse_tree(text, source, number)
            except TreeSyntaxError as err:
                if not err.reason.startswith("unbalanced '('") or source == "<command line>":
                    raise  # (a tree given as an argument is whole: no lines to join)
                # NLTK's str(tree), say, lays a long tree out over several lines.
                reason = f"{err.reason} (a tree file holds each tree whole on one line)"
                raise TreeSyntaxError(reason, source, err.line, err.column) from None
            yield tree


def line_text(raw: str, number: int) -> str:
    """Line ``number`` (from 1) of a tree file as the reader takes it: its end of line gone,
    and on the first line a byte-order mark (which some editors write); "" when blank."""
    text = raw.rstrip("\r\n")
    if number == 1:
        text = text.removeprefix("\ufeff")
    return text if text.strip(SPACE) else ""


def read_trees(path: str | Path) -> list[Tree]:
    """Every tree in a PTB bracket file (plain UTF-8), errors naming ``path:line:column``."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8", newline="") as f:
            return list(iter_trees(f, str(path)))
    except UnicodeDecodeError as err:
        raise not_utf8(path, err) from err


def not_utf8(path: Path, err: UnicodeDecodeError) -> TreeSyntaxError:
    """The error for a file that is not UTF-8, at the line and column of its first bad byte
    (the text reader decodes ahead in blocks, so its own position names no line)."""
    with path.open("rb") as f:
        head = f.read(4)
        if head[:2] == b"\x1f\x8b":
            return TreeSyntaxError(
                "a gzip file: tree files are read as plain text, gunzip it first", str(path), 1, 1
            )
        if head == b"PK\x03\x04":  # SST ships as trainDevTestTrees_PTB.zip
            return TreeSyntaxError(
                "a zip archive: unzip it and give the tree files inside", str(path), 1, 1
            )
        f.seek(0)
        return not_utf8_lines(f, str(path), err)


def not_utf8_lines(lines: Iterable[bytes], source: str, err: UnicodeDecodeError) -> TreeSyntaxError:
    """The error for ``source``'s lines of bytes (a file's, standard input's) that are not
    UTF-8, at the line and column of the first bad byte."""
    for number, raw in enumerate(lines, start=1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            column = len(raw[: bad.start].decode("utf-8")) + 1
            return TreeSyntaxError(f"not UTF-8 text ({bad.reason})", source, number, column)
    return TreeSyntaxError(f"not UTF-8 text ({err.reason})", source, 1, 1)


def write_trees(trees: Iterable[Tree], path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8", newline="") as f:
        for tree in trees:
            f.write(tree.to_ptb() + "\n")
