"""Pass 1 of SQuAD preparation: tokenise each article once, map answers to token spans, apply
the train limits, and stream each kept paragraph and example to disk; pass 2 turns token
*type* ids into word and character ids chunk by chunk. The directory layout is described in
:mod:`treeqa.data.squad_prepare`.

Shape letters: T tokens, W characters per token.
"""

from __future__ import annotations

import errno
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from treeqa.data.squad import Article, Tokenizer, answer_token_span

_CHUNK = 1 << 18  # tokens converted per step in pass 2


@dataclass(frozen=True)
class Limits:
    """Train-time limits (QANet, Yu et al. 2018). Dev keeps every question; W applies to both."""

    context: int = 400  # tokens
    question: int = 50  # tokens
    answer: int = 30  # tokens, end - start + 1
    chars: int = 16  # characters kept per token (W)


class Appender:
    """Appends equal-width rows to a raw file; ``save`` turns it into a ``.npy``."""

    def __init__(self, path: Path, dtype: type, width: int = 0):
        self.path, self.dtype, self.width, self.rows = path, np.dtype(dtype), width, 0
        self.raw = path.with_suffix(".raw")
        self._file: IO[bytes] | None = self.raw.open("wb")

    def append(self, rows: Any) -> None:
        a = np.ascontiguousarray(rows, dtype=self.dtype)
        assert self._file is not None and a.shape[1:] == ((self.width,) if self.width else ())
        self._file.write(a.tobytes())
        self.rows += len(a)

    def memmap(self) -> np.ndarray:
        if self._file is not None:
            self._file.close()
            self._file = None
        shape = (self.rows, self.width) if self.width else (self.rows,)
        if not self.rows:
            return np.zeros(shape, self.dtype)
        return np.memmap(self.raw, self.dtype, "r", shape=shape)

    def save(self) -> None:
        write_npy(self.path, self.memmap(), lambda a: a)
        self.raw.unlink()


def write_npy(path: Path, src: np.ndarray, convert: Callable[[np.ndarray], np.ndarray]) -> None:
    """``convert(src)`` written chunk by chunk into a new ``.npy`` (dtype/width from a probe)."""
    probe = convert(src[:1])
    shape = (len(src), *probe.shape[1:])
    descr = np.lib.format.dtype_to_descr(probe.dtype)
    with path.open("wb") as f:  # the header, then room for the rows before they are mapped
        np.lib.format.write_array_header_1_0(
            f, {"descr": descr, "fortran_order": False, "shape": shape}
        )
        reserve(f, path, f.tell() + probe.dtype.itemsize * int(np.prod(shape)))
    out = np.lib.format.open_memmap(path, "r+")
    for a in range(0, len(src), _CHUNK):
        out[a : a + _CHUNK] = convert(src[a : a + _CHUNK])
    out.flush()
    del out


def reserve(f: IO[bytes], path: Path, size: int) -> None:
    """Disk space for ``size`` bytes of the open file ``f`` (``path``), taken before it is
    memory-mapped: a mapped page that finds the disk full kills the process (SIGBUS), where
    this raises ENOSPC naming ``path``. A system or file system that cannot reserve space
    (no ``posix_fallocate``; EOPNOTSUPP, EINVAL) leaves the file to grow as it is written."""
    if not hasattr(os, "posix_fallocate"):  # macOS, Windows
        return
    try:
        os.posix_fallocate(f.fileno(), 0, size)
    except OSError as err:
        if err.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            return
        raise OSError(err.errno, err.strerror, str(path)) from None


class TokenTypes:
    """Distinct token strings seen in either split, numbered in order of first sight."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}  # spaCy orth hash -> type id
        self.strings: list[str] = []

    def ids(self, text: str, spans: np.ndarray, orth: np.ndarray) -> np.ndarray:
        out = np.empty(len(orth), np.int32)  # [T]
        index, strings = self.index, self.strings
        for i, h in enumerate(orth.tolist()):
            t = index.get(h)
            if t is None:
                t = index[h] = len(strings)
                strings.append(text[spans[i, 0] : spans[i, 1]])
            out[i] = t
        return out


def negative_ids(made: list[tuple[int, str]], ids: set[str]) -> dict[int, str]:
    """New ids for the made negatives ``(row, id given)`` whose id, the question's own id and
    ``#neg``, is also a question id of the file (``ids``): the first of ``ID#neg2``,
    ``ID#neg3``, ... that neither a question nor another negative has. Row -> new id."""
    clashes = [(row, given) for row, given in made if given in ids]
    if not clashes:
        return {}
    taken = ids | {given for _, given in made}
    renamed = {}
    for row, given in clashes:
        k = 2
        while f"{given}{k}" in taken:
            k += 1
        renamed[row] = f"{given}{k}"
        taken.add(renamed[row])
    return renamed


class SplitWriter:
    """Pass 1 of one split: tokenise, map answers, filter (train), stream to disk."""

    def __init__(
        self,
        folder: Path,
        split: str,
        limits: Limits,
        negatives: str | None,
        negative_fraction: float,
        seed: int,
    ):
        folder.mkdir(parents=True)
        self.folder, self.train, self.limits = folder, split == "train", limits
        self.negatives = negatives if self.train else None
        self.negative_fraction, self.seed = negative_fraction, seed
        self.ctx_tids = Appender(folder / "context_tids.npy", np.int32)
        self.q_tids = Appender(folder / "question_tids.npy", np.int32)
        self.arrays = {
            "context_spans": Appender(folder / "context_spans.npy", np.int32, 2),
            "question_spans": Appender(folder / "question_spans.npy", np.int32, 2),
            "context_offsets": Appender(folder / "context_offsets.npy", np.int64),
            "question_offsets": Appender(folder / "question_offsets.npy", np.int64),
            "paragraph": Appender(folder / "paragraph.npy", np.int32),
            "starts": Appender(folder / "starts.npy", np.int32),
            "ends": Appender(folder / "ends.npy", np.int32),
        }
        self.arrays["context_offsets"].append([0])
        self.arrays["question_offsets"].append([0])
        self.contexts = (folder / "contexts.jsonl").open("w", encoding="utf-8")
        self.questions = (folder / "questions.jsonl").open("w", encoding="utf-8")
        self.gold = (folder / "gold.json").open("w", encoding="utf-8")
        self.gold.write('{"data": [')
        self.counts: Counter[str] = Counter()
        self.max_len = {"context": 0, "question": 0}
        self.n_ctx = self.n_q = 0
        self.ids: set[str] = set()  # every question id read, for negative_ids
        self.negative_rows: list[tuple[int, str]] = []  # (example row, id given) of each made

    def add(self, article: Article, tok: Tokenizer, types: TokenTypes) -> None:
        paras = article.paragraphs
        c = self.counts
        ctx = list(tok.pipe(p.context for p in paras))
        qs = [(pi, q) for pi, p in enumerate(paras) for q in p.questions]
        qtok = list(tok.pipe((q.text for _, q in qs), batch_size=1024))
        lim = self.limits
        examples: list[tuple[int, int, int, int, str]] = []  # (paragraph, question, y1, y2, id)
        for qi, (pi, q) in enumerate(qs):
            spans = ctx[pi][0]
            y1 = y2 = -1
            for a in q.answers:
                mapped = answer_token_span(spans, paras[pi].context, a.start, a.start + len(a.text))
                assert mapped is not None, "the reader rejects whitespace-only answers"
                c["answers_inexact"] += not mapped[2]
                if y1 < 0:
                    y1, y2 = mapped[0], mapped[1]
            c["answers"] += len(q.answers)
            reason = None
            if self.train and len(spans) > lim.context:
                reason = "context_too_long"
            elif self.train and len(qtok[qi][0]) > lim.question:
                reason = "question_too_long"
            elif self.train and y2 - y1 + 1 > lim.answer:
                reason = "answer_too_long"
            if reason:
                c["dropped_" + reason] += 1
            else:
                examples.append((pi, qi, y1, y2, q.id))
        self.ids.update(q.id for _, q in qs)
        if self.negatives == "same_article":
            made = self._negatives(article.index, examples, [len(s) for s, _ in ctx])
            row = c["examples"] + len(examples)
            self.negative_rows += [(row + k, e[4]) for k, e in enumerate(made)]
            examples += made
        used = sorted({e[0] for e in examples})
        new = {pi: c["paragraphs"] + k for k, pi in enumerate(used)}
        for pi in used:
            spans, orth = ctx[pi]
            self.ctx_tids.append(types.ids(paras[pi].context, spans, orth))
            self.arrays["context_spans"].append(spans.reshape(-1, 2))
            self.n_ctx += len(spans)
            self.arrays["context_offsets"].append([self.n_ctx])
            self.contexts.write(json.dumps(paras[pi].context, ensure_ascii=False) + "\n")
            self.max_len["context"] = max(self.max_len["context"], len(spans))
        for _, qi, _, _, qid in examples:
            spans, orth = qtok[qi]
            self.q_tids.append(types.ids(qs[qi][1].text, spans, orth))
            self.arrays["question_spans"].append(spans.reshape(-1, 2))
            self.n_q += len(spans)
            self.arrays["question_offsets"].append([self.n_q])
            line = {"id": qid, "question": qs[qi][1].text}
            self.questions.write(json.dumps(line, ensure_ascii=False) + "\n")
            self.max_len["question"] = max(self.max_len["question"], len(spans))
        for name, col in (("paragraph", 0), ("starts", 2), ("ends", 3)):
            values = [new[e[0]] if col == 0 else e[col] for e in examples]
            self.arrays[name].append(np.array(values, np.int32))
        c["paragraphs"] += len(used)
        c["examples"] += len(examples)
        c["examples_no_answer"] += sum(e[2] < 0 for e in examples)
        self._gold(article)

    def _negatives(self, index: int, examples: list, ctx_lens: list[int]) -> list:
        """Unanswerable examples: an answerable question paired with another paragraph of the
        same article (Rajpurkar et al. 2018 built SQuAD 2.0 negatives within an article too)."""
        rng = np.random.default_rng([self.seed, index])  # per article: order-independent
        out = []
        for pi, qi, y1, _, qid in examples:
            if y1 < 0 or rng.random() >= self.negative_fraction:
                continue
            if len(ctx_lens) < 2:
                self.counts["negatives_no_other_paragraph"] += 1
                continue
            # One of the other paragraphs, drawn without listing them: a list per question
            # made an article of P paragraphs cost P * P.
            other = int(rng.integers(len(ctx_lens) - 1))
            other += other >= pi
            if ctx_lens[other] > self.limits.context:
                self.counts["negatives_dropped_context_too_long"] += 1
                continue
            out.append((other, qi, -1, -1, qid + "#neg"))
            self.counts["negatives"] += 1
        return out

    def _gold(self, article: Article) -> None:
        qas = [
            {"id": q.id, "answers": [{"text": a.text, "answer_start": a.start} for a in q.answers]}
            | ({"is_impossible": True} if q.is_impossible else {})
            for p in article.paragraphs
            for q in p.questions
        ]
        sep = ", " if self.counts["gold_articles"] else ""
        self.gold.write(sep + json.dumps({"title": article.title, "paragraphs": [{"qas": qas}]}))
        self.counts["gold_articles"] += 1

    def finish_pass1(self, version: str) -> None:
        for f in (self.contexts, self.questions):
            f.close()
        renamed = negative_ids(self.negative_rows, self.ids)
        if renamed:  # rare: the file's own ids end in "#neg"; rewritten once, line by line
            path = self.folder / "questions.jsonl"
            tmp = path.with_suffix(".tmp")
            with path.open(encoding="utf-8") as src, tmp.open("w", encoding="utf-8") as dst:
                for row, line in enumerate(src):
                    if row in renamed:
                        line = (
                            json.dumps({**json.loads(line), "id": renamed[row]}, ensure_ascii=False)
                            + "\n"
                        )
                    dst.write(line)
            tmp.replace(path)
        self.gold.write(f'], "version": {json.dumps(version)}}}\n')
        self.gold.close()
        for a in self.arrays.values():
            a.save()

    def finish_pass2(self, type_words: np.ndarray, type_chars: np.ndarray) -> None:
        for tids, name in ((self.ctx_tids, "context"), (self.q_tids, "question")):
            src = tids.memmap()
            write_npy(self.folder / f"{name}_words.npy", src, lambda t: type_words[t])
            write_npy(self.folder / f"{name}_chars.npy", src, lambda t: type_chars[t])
            del src
            tids.raw.unlink()
