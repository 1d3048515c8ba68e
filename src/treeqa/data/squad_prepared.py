"""Reading a prepared SQuAD directory: memory-mapped arrays -> length-bucketed QABatches.

The layout is written by :func:`treeqa.data.squad_prepare.prepare_squad`. Arrays are opened
with ``mmap_mode="r"``, so a split costs page cache, not process memory, and several data
loader workers share it. Shape letters: B examples, L context tokens, J question tokens,
W characters per token, N examples of the split, P paragraphs.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from treeqa.data.collated import Collated
from treeqa.data.qa_batch import QABatch
from treeqa.data.squad_prepare import FORMAT_VERSION, crc32
from treeqa.data.vectors import NPY_HEADER_ERRORS
from treeqa.data.vocab import Vocab
from treeqa.eval.squad import gold_answers

__all__ = ["PreparedSplit", "load_meta", "tokenizer_drift"]

_ARRAYS = {  # name -> number of dimensions
    "context_offsets": 1,
    "context_words": 1,
    "context_chars": 2,
    "context_spans": 2,
    "question_offsets": 1,
    "question_words": 1,
    "question_chars": 2,
    "paragraph": 1,
    "starts": 1,
    "ends": 1,
}
_TEXTS = ("contexts.jsonl", "questions.jsonl", "gold.json")
_AGAIN = "prepare the directory again (treeqa data prepare squad)"
_META_FIELDS = {
    ("version",): str,
    ("splits",): dict,
    ("limits", "chars"): int,
    ("vocab", "words"): int,
    ("vocab", "chars"): int,
    ("vocab", "vector_dim"): int,
}
"""What readers of ``meta.json`` look up, and its type."""


def load_meta(directory: str | Path) -> dict[str, Any]:
    """The ``meta.json`` of a prepared directory; a clear error when it is not one, or was
    written in another format version."""
    path = Path(directory) / "meta.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory} is not a prepared SQuAD directory (no meta.json); "
            "run `treeqa data prepare squad` first"
        )
    meta = _read_json(path)
    if not isinstance(meta, dict) or meta.get("format") != "treeqa-squad":
        raise ValueError(f"{path}: not a treeqa SQuAD meta file")
    version = meta.get("format_version")
    if version not in (1, FORMAT_VERSION):
        raise ValueError(
            f"{path}: format version {version!r}, where this treeqa reads versions 1 to "
            f"{FORMAT_VERSION}; {_AGAIN}"
        )
    if version == FORMAT_VERSION and not isinstance(meta.get("crc32"), dict):
        # Version 1 had none; a version-2 folder without them would open unchecked.
        raise ValueError(f"{path}: field 'crc32' is missing or not of type dict; {_AGAIN}")
    for keys, kind in _META_FIELDS.items():
        value: Any = meta
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool):
            field = ".".join(keys)
            raise ValueError(f"{path}: field {field!r} is missing or not of type {kind.__name__}")
    return meta


def tokenizer_drift(meta: dict[str, Any], directory: str | Path) -> str | None:
    """A one-line warning when the prepared ``directory`` (its ``meta``) was tokenised by
    another spaCy major.minor than the one here, with which ``predict`` tokenises text: its
    rules may split some text otherwise. None when they agree, or when either is not known
    (a folder prepared before meta.json recorded it; no spaCy installed)."""
    tokenizer = meta.get("tokenizer")
    made = tokenizer.get("spacy_version") if isinstance(tokenizer, dict) else None
    try:
        here = importlib.metadata.version("spacy")
    except importlib.metadata.PackageNotFoundError:
        return None
    if not isinstance(made, str) or made.split(".")[:2] == here.split(".")[:2]:
        return None
    return (
        f"{directory} was tokenised with spaCy {made}, and this is spaCy {here}: some text "
        "may be split into other tokens than `treeqa predict qa` splits it now; prepare it "
        "again with this spaCy to be sure"
    )


def _read_json(path: Path, file: IO[bytes] | None = None) -> Any:
    """The JSON value in ``path`` (read from ``file``, its open file, where given)."""
    try:
        if file is None:
            return json.loads(path.read_text(encoding="utf-8"))
        file.seek(0)
        return json.loads(file.read().decode("utf-8"))
    except ValueError as err:  # broken JSON or UTF-8: a damaged file
        raise ValueError(f"{path}: not readable JSON ({err}); {_AGAIN}") from err


def _read_jsonl(path: Path, file: IO[bytes], rows: int) -> list[Any]:
    """The ``rows`` values of ``.jsonl`` file ``path`` (its open ``file``), one a line; a
    damaged line is named."""
    values: list[Any] = []
    file.seek(0)
    try:
        for line in file:
            values.append(json.loads(line.decode("utf-8")))
    except ValueError as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else err
        raise ValueError(f"{path}:{len(values) + 1}: {reason}; {_AGAIN}") from err
    if len(values) != rows:
        raise ValueError(f"{path}: {len(values)} lines, where the arrays need {rows}; {_AGAIN}")
    return values


def _load(path: Path, mmap: bool = True) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{path}: missing; {_AGAIN}") from err
    except (EOFError, *NPY_HEADER_ERRORS) as err:  # cut short, or not an .npy array at all
        raise ValueError(f"{path}: not a whole .npy array ({err}); {_AGAIN}") from err


def _folder(directory: Path) -> tuple[int, int]:
    """What tells the folder ``directory`` apart from one prepared again in its place, which
    ``treeqa data prepare squad --overwrite`` renames over it."""
    st = os.stat(directory)
    return st.st_dev, st.st_ino


class PreparedSplit:
    """One split (``"train"`` or ``"dev"``) of a prepared directory, row = example.

    Its files are opened here and read from what was opened: a folder prepared again into the
    same place (``--overwrite``) while a training reads it replaces them by name, and the
    training goes on with the data it began with (the system keeps the old files until
    they are closed)."""

    def __init__(self, directory: str | Path, split: str):
        self.directory, self.split = Path(directory), split
        self.opened = _folder(self.directory) if self.directory.is_dir() else None
        self.meta = load_meta(directory)
        if split not in self.meta["splits"]:
            raise ValueError(f"{directory} has no split {split!r}")
        folder = self.directory / split
        self.arrays: dict[str, np.ndarray] = {
            name: _load(folder / f"{name}.npy") for name in _ARRAYS
        }
        self._check(folder)
        for name in _TEXTS:  # read at the first evaluation, after a training epoch: missing now
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder / name}: missing; {_AGAIN}")
        self.texts: dict[str, IO[bytes]] = {name: (folder / name).open("rb") for name in _TEXTS}
        weakref.finalize(self, _close, list(self.texts.values()))
        self.check_unchanged()
        a = self.arrays
        self.context_lengths = np.diff(a["context_offsets"])[a["paragraph"]]  # [N]
        self.question_lengths = np.diff(a["question_offsets"])  # [N]
        if not len(self):  # an empty training stream would wait for a batch forever
            raise ValueError(f"{folder}: the {split} split holds no examples")
        for name in _ARRAYS:  # after the checks above, which say what is wrong where they can
            self._verify(f"{split}/{name}.npy")

    def _check(self, folder: Path) -> None:
        """Arrays that fit together: one cut short, or left by another run, is an error
        naming it here rather than an IndexError mid-epoch. Reads O(N + P) numbers and scans
        the token ids (tens of milliseconds for SQuAD train)."""
        a, width = self.arrays, self.chars_per_word

        def fail(name: str, problem: str) -> ValueError:
            # A byte changed in one array can show in another (a start past its end, which
            # the span check names by ends.npy): the checksums say which file changed.
            if self._unchanged(f"{self.split}/{name}.npy"):
                for other in _ARRAYS:
                    if not self._unchanged(f"{self.split}/{other}.npy"):
                        return self._damaged(f"{self.split}/{other}.npy")
            return ValueError(f"{folder / name}.npy: {problem}; {_AGAIN}")

        for name, ndim in _ARRAYS.items():
            if a[name].dtype.kind not in "iu" or a[name].ndim != ndim:
                raise fail(name, f"a {a[name].dtype} array of shape {a[name].shape}")
        n = len(a["paragraph"])
        paragraphs = len(a["context_offsets"]) - 1
        for kind, rows in (("context", paragraphs), ("question", n)):
            offsets = a[f"{kind}_offsets"]
            if len(offsets) != rows + 1 or rows < 0 or offsets[0] or (np.diff(offsets) < 0).any():
                raise fail(f"{kind}_offsets", f"not {max(rows, 0) + 1} rising offsets from 0")
            tokens = int(offsets[-1])
            shapes = {"words": (tokens,), "chars": (tokens, width), "spans": (tokens, 2)}
            for part, shape in shapes.items():
                name = f"{kind}_{part}"
                if name in a and a[name].shape != shape:
                    raise fail(name, f"shape {a[name].shape}, where the offsets need {shape}")
        # Ids past the vocabulary (arrays from another preparation than its word_vocab.json)
        # would stop training with an IndexError, or a device-side assert on a GPU.
        for part in ("words", "chars"):
            size = self.meta["vocab"][part]
            for kind in ("context", "question"):
                name = f"{kind}_{part}"
                if a[name].size and not 0 <= a[name].min() <= a[name].max() < size:
                    raise fail(name, f"an id outside the {size} of meta.json's vocab.{part}")
        for name in ("starts", "ends"):
            if len(a[name]) != n:
                raise fail(name, f"{len(a[name])} rows, where paragraph.npy has {n}")
        if n and not 0 <= a["paragraph"].min() <= a["paragraph"].max() < paragraphs:
            raise fail("paragraph", f"a paragraph index outside 0-{paragraphs - 1}")
        lengths = np.diff(a["context_offsets"])[a["paragraph"]]  # [N]
        starts, ends = np.asarray(a["starts"]), np.asarray(a["ends"])  # [N]
        unanswerable = (starts == -1) & (ends == -1)
        inside = (starts >= 0) & (starts <= ends) & (ends < lengths)
        if not (unanswerable | inside).all():
            raise fail("ends", "an answer span outside its context")

    def _verify(self, name: str, file: IO[bytes] | None = None) -> None:
        """A ValueError when the file ``name`` (relative to the folder; read from ``file``, its
        open file, where given) does not match the CRC-32 that meta.json recorded when it was
        written (``_unchanged``)."""
        if not self._unchanged(name, file):
            raise self._damaged(name)

    def _unchanged(self, name: str, file: IO[bytes] | None = None) -> bool:
        """Whether the file ``name`` (as in ``_verify``) matches the CRC-32 that meta.json
        recorded; true for the folders of format version 1, prepared before it recorded them."""
        if self.meta["format_version"] == 1:
            return True
        if file is None:
            with (self.directory / name).open("rb") as f:
                crc = crc32(f)
        else:
            crc = crc32(file)
        recorded: int | None = self.meta["crc32"].get(name)
        return recorded == crc

    def _damaged(self, name: str) -> ValueError:
        """The error for the file ``name`` whose bytes changed since it was prepared."""
        self.check_unchanged()  # a file of a folder prepared again since: say that instead
        return ValueError(
            f"{self.directory / name}: damaged: its bytes do not match the CRC-32 that "
            f"meta.json recorded when it was prepared; {_AGAIN}"
        )

    def check_unchanged(self) -> None:
        """A ValueError when the folder was prepared again since this split opened it: what
        was read from it by name (its vocabularies, vectors) may be of either preparation."""
        if _folder(self.directory) != self.opened:
            raise ValueError(
                f"{self.directory} was prepared again (treeqa data prepare squad --overwrite) "
                "while it was being opened: run this command again"
            )

    def __len__(self) -> int:
        return len(self.arrays["paragraph"])

    @property
    def chars_per_word(self) -> int:
        return int(self.meta["limits"]["chars"])

    def word_vocab(self) -> Vocab:
        return self._vocab("word_vocab.json", "words")

    def char_vocab(self) -> Vocab:
        return self._vocab("char_vocab.json", "chars")

    def _vocab(self, name: str, part: str) -> Vocab:
        """The vocabulary in ``name``, as long as meta.json's ``vocab.<part>`` says."""
        path = self.directory / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; {_AGAIN}")
        vocab, size = Vocab.load(path), self.meta["vocab"][part]
        if len(vocab) != size:  # else ids are read as other words, or past the end
            raise ValueError(f"{path}: {len(vocab)} tokens, where meta.json says {size}; {_AGAIN}")
        self._verify(name)
        return vocab

    def word_vectors(self) -> np.ndarray:
        """[V, D] float32; rows 0 (padding) and 1 (unknown) are zero."""
        path = self.directory / "word_vectors.npy"
        vectors = _load(path, mmap=False)
        shape = (self.meta["vocab"]["words"], self.meta["vocab"]["vector_dim"])
        if vectors.shape != shape:
            raise ValueError(
                f"{path}: shape {vectors.shape}, where meta.json says {shape}; {_AGAIN}"
            )
        self._verify("word_vectors.npy")
        return vectors

    def gold(self) -> dict[str, Any]:
        """Every question read for this split, in SQuAD layout: the input of
        :func:`treeqa.eval.squad.evaluate_predictions`."""
        path = self.directory / self.split / "gold.json"
        gold: dict[str, Any] = _read_json(path, self.texts["gold.json"])
        gold_answers(gold, str(path))  # a file edited or overwritten since: named here
        self._verify(f"{self.split}/gold.json", self.texts["gold.json"])
        return gold

    # Texts are loaded on first use: training never needs them, evaluation and serving do.
    @functools.cached_property
    def _contexts(self) -> list[str]:
        rows = len(self.arrays["context_offsets"]) - 1
        name = "contexts.jsonl"
        contexts = _read_jsonl(self.directory / self.split / name, self.texts[name], rows)
        self._verify(f"{self.split}/{name}", self.texts[name])
        return contexts

    @functools.cached_property
    def _questions(self) -> list[dict[str, str]]:
        name = "questions.jsonl"
        questions = _read_jsonl(self.directory / self.split / name, self.texts[name], len(self))
        self._verify(f"{self.split}/{name}", self.texts[name])
        return questions

    def question_id(self, row: int) -> str:
        return self._questions[row]["id"]

    def question(self, row: int) -> str:
        return self._questions[row]["question"]

    def context(self, row: int) -> str:
        return self._contexts[int(self.arrays["paragraph"][row])]

    def char_span(self, row: int, start: int, end: int) -> tuple[int, int]:
        """Character (begin, end) in :meth:`context` of tokens ``start..end`` (inclusive)."""
        p = int(self.arrays["paragraph"][row])
        first, n = int(self.arrays["context_offsets"][p]), int(self.context_lengths[row])
        if not 0 <= start <= end < n:
            raise IndexError(f"token span {start}..{end} outside a {n}-token context (row {row})")
        spans = self.arrays["context_spans"]
        return int(spans[first + start, 0]), int(spans[first + end, 1])

    def answer_text(self, row: int, start: int, end: int) -> str:
        """The original context text of tokens ``start..end`` (inclusive); "" for a no-answer
        prediction (``start < 0``), as the official v2.0 script expects."""
        if start < 0:
            return ""
        begin, finish = self.char_span(row, start, end)
        return self.context(row)[begin:finish]

    def batch(self, rows: np.ndarray | list[int], pad_multiple: int = 1) -> QABatch:
        """The examples ``rows``, padded to their own longest context and question, rounded up
        to a multiple of ``pad_multiple`` (a few fixed shapes, for CUDA graphs)."""
        rows = np.asarray(rows, dtype=np.int64)  # [B]
        a = self.arrays
        c_first = a["context_offsets"][a["paragraph"][rows]]  # [B]
        q_first = a["question_offsets"][rows]  # [B]
        cw, cc = _gather(
            a["context_words"],
            a["context_chars"],
            c_first,
            self.context_lengths[rows],
            pad_multiple,
        )
        qw, qc = _gather(
            a["question_words"],
            a["question_chars"],
            q_first,
            self.question_lengths[rows],
            pad_multiple,
        )
        return QABatch(
            context_words=cw,
            context_chars=cc,
            question_words=qw,
            question_chars=qc,
            starts=torch.from_numpy(a["starts"][rows].astype(np.int64)),
            ends=torch.from_numpy(a["ends"][rows].astype(np.int64)),
            index=torch.from_numpy(rows),
        )

    def batches(
        self,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        bucket: bool = True,
        rows: np.ndarray | None = None,
        pad_multiple: int = 1,
    ) -> Collated[QABatch]:
        """Batches over the split (or over ``rows``), each collated when read. With ``bucket``,
        examples are sorted by context length within chunks of 100 batches, so each batch pads
        to a similar length; with ``shuffle`` the rows and then the batch order are permuted by
        ``seed`` (pass a new seed, e.g. ``seed + epoch``, for each epoch). A batch whose
        longest context L runs past the training limit C (dev keeps every context) holds
        ``batch_size`` x (C / L)^2 rows, at least one: attention's memory grows with B x L^2,
        so 32 dev contexts of 5,000 tokens would need 156 times a training batch's.
        ``pad_multiple``: as ``batch`` takes it."""
        order = np.arange(len(self)) if rows is None else np.asarray(rows, dtype=np.int64)
        rng = np.random.default_rng(seed)
        if shuffle:
            order = rng.permutation(order)
        if bucket and len(order):
            chunk = 100 * batch_size
            parts = np.split(order, range(chunk, len(order), chunk))
            order = np.concatenate(
                [p[np.argsort(self.context_lengths[p], kind="stable")] for p in parts]
            )
        groups = self._groups(order, batch_size)
        if shuffle:
            groups = [groups[i] for i in rng.permutation(len(groups))]
        return Collated(groups, self.collate(pad_multiple))

    def collate(self, pad_multiple: int = 1) -> Callable[[np.ndarray], QABatch]:
        """``batch`` with this padding, for ``Collated``."""
        return functools.partial(self.batch, pad_multiple=pad_multiple)

    def _groups(self, order: np.ndarray, batch_size: int) -> list[np.ndarray]:
        """``order`` cut into batches of ``batch_size`` rows, fewer past the context limit."""
        limit = int(self.meta["limits"].get("context", 0)) or None
        groups, i = [], 0
        while i < len(order):
            group = order[i : i + batch_size]
            longest = int(self.context_lengths[group].max())
            if limit is not None and longest > limit:
                group = group[: max(1, batch_size * limit * limit // (longest * longest))]
            groups.append(group)
            i += len(group)
        return groups


def _close(files: list[IO[bytes]]) -> None:
    for file in files:
        file.close()


def _gather(
    words: np.ndarray,
    chars: np.ndarray,
    first: np.ndarray,
    lengths: np.ndarray,
    multiple: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged rows ``[first[b], first[b] + lengths[b])`` of the flat token arrays, right-padded
    with 0 to the batch's longest row rounded up to ``multiple``: words [B, L] and chars
    [B, L, W] int64."""
    width = max(int(lengths.max(initial=0)), 1)  # a zero-width tensor would break convs
    width = -(-width // multiple) * multiple
    if not len(words):
        return torch.zeros(len(first), width, dtype=torch.long), torch.zeros(
            len(first), width, chars.shape[1], dtype=torch.long
        )
    pos = first[:, None] + np.arange(width)  # [B, L]
    valid = np.arange(width) < lengths[:, None]  # [B, L]
    pos = np.where(valid, pos, 0)
    w = np.where(valid, words[pos], 0).astype(np.int64)  # [B, L]
    c = np.where(valid[..., None], chars[pos], 0).astype(np.int64)  # [B, L, W]
    return torch.from_numpy(w), torch.from_numpy(c)
