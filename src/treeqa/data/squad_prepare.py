"""SQuAD featurisation: tokenised train/dev files -> vocabularies and memory-mappable arrays.

Two passes. Pass 1 reads each split article by article, tokenises it once, applies the train
limits, and streams to disk each kept paragraph's text and token offsets and each kept
example's question, answer span and token *type* ids (an index per distinct token string).
The vocabularies are then built from type counts and the vectors file. Pass 2 turns type ids
into word and character ids with two table look-ups, chunk by chunk into preallocated
``.npy`` files, so no split is ever held in memory. Layout of a prepared directory::

    meta.json  word_vocab.json  char_vocab.json  word_vectors.npy [V, D] float32
    train/ dev/ (each)
      context_offsets.npy [P+1] int64   paragraph p owns flat context tokens [o[p], o[p+1])
      context_words.npy   [Tc] int32    word ids (0 padding, 1 unknown)
      context_chars.npy   [Tc, W] uint16 char ids of the first W chars, 0-padded
      context_spans.npy   [Tc, 2] int32 character (start, end) of each token in its paragraph
      question_offsets.npy [N+1] int64  example n owns flat question tokens [q[n], q[n+1])
      question_words.npy  [Tq] int32,  question_chars.npy [Tq, W] uint16,  question_spans.npy [Tq, 2]
      paragraph.npy [N] int32  starts.npy [N] int32  ends.npy [N] int32 (inclusive; -1 = no answer)
      contexts.jsonl   one JSON string per paragraph (the original text)
      questions.jsonl  {"id", "question"} per example (a made negative's id: see prepare_squad)
      gold.json        every question read, in SQuAD layout without contexts (for scoring)

meta.json records a CRC-32 of each other file (``crc32``, by path in the folder), which the
reader checks: a byte changed on disk or in a copy is an error, not other token ids. Folders of
format version 1, written before the CRC-32s, are read unchecked; a version-2 meta.json without
them is refused.

Contexts are stored once per paragraph, not once per question (4.6 questions share one
train paragraph), and tokens are ragged, so dev contexts longer than the train limit are kept
whole. Shape letters: P paragraphs, N examples, Tc/Tq tokens, W characters per token.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import numpy as np

from treeqa import __version__
from treeqa.data.output_dir import built_aside, check_replaceable
from treeqa.data.squad import ReadStats, Tokenizer, iter_articles
from treeqa.data.squad_features import Limits, SplitWriter, TokenTypes
from treeqa.data.vectors import find_spacy_pair, load_vectors
from treeqa.data.vocab import PAD, UNK, Vocab

__all__ = ["FORMAT_VERSION", "Limits", "build_vocabularies", "prepare_squad"]

FORMAT_VERSION = 2  # 2: meta.json holds a CRC-32 of every file; 1 (before that) is read unchecked
WRITTEN = ("train", "dev", "word_vocab.json", "char_vocab.json", "word_vectors.npy", "meta.json")
"""What a preparation writes into its --out, and all that --overwrite deletes."""


def crc32(file: IO[bytes]) -> int:
    """The CRC-32 of all of the open ``file``, read from its start 1 MiB at a time."""
    file.seek(0)
    crc = 0
    while block := file.read(1 << 20):
        crc = zlib.crc32(block, crc)
    return crc


def file_info(path: Path) -> dict[str, Any]:
    """``path``'s name, size and the SHA-256 of all of it."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"name": path.name, "bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def build_vocabularies(
    types: list[str],
    counts: np.ndarray,
    train_counts: np.ndarray,
    vectors: Path,
    seed: int,
    cache_dir: Path | None,
) -> tuple[Vocab, Vocab, np.ndarray, np.ndarray, dict[str, Any]]:
    """(word vocab, char vocab, word vectors [V, D], type -> word id [types], vectors report).

    Words are the tokens of train+dev that have a pretrained vector, most frequent first, as in
    the reference QANet/R-Net preprocessing: with fixed vectors, a dev word that has one is
    known, not leaked. Characters are those of train tokens, most frequent first.
    """
    order = np.argsort(-counts, kind="stable")  # ties keep first sight
    order = order[[types[i] not in (PAD, UNK) for i in order.tolist()]]
    vec = load_vectors(vectors, [types[i] for i in order.tolist()], seed=seed, cache_dir=cache_dir)
    found = order[vec.found]
    words = Vocab((PAD, UNK, *(types[i] for i in found.tolist())))
    matrix = np.zeros((len(words), vec.matrix.shape[1]), np.float32)  # [V, D]; pad, unk = 0
    matrix[2:] = vec.matrix[vec.found]
    type_words = np.ones(len(types), np.int32)
    type_words[found] = np.arange(2, len(words), dtype=np.int32)
    chars: Counter[str] = Counter()
    for i in np.flatnonzero(train_counts).tolist():
        for ch in types[i]:
            chars[ch] += int(train_counts[i])
    char_vocab = Vocab((PAD, UNK, *(ch for ch, _ in chars.most_common() if ch not in (PAD, UNK))))
    if len(char_vocab) > np.iinfo(np.uint16).max:
        raise ValueError(f"{len(char_vocab)} distinct characters do not fit the uint16 char ids")
    report = asdict(vec.report) | {"summary": vec.report.summary()}
    return words, char_vocab, matrix, type_words, report


def prepare_squad(
    train: str | Path,
    dev: str | Path,
    vectors: str | Path,
    out: str | Path,
    *,
    limits: Limits | None = None,
    skip_bad: bool = False,
    negatives: str | None = None,
    negative_fraction: float = 0.5,
    seed: int = 0,
    vectors_cache: str | Path | None = None,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Prepare ``train`` and ``dev`` SQuAD files into ``out``; returns the meta dictionary.

    ``negatives="same_article"`` adds, for a ``negative_fraction`` of answerable train
    questions, an unanswerable example pairing the question with another paragraph of its
    article (deterministic given ``seed``). Its id is the question's id followed by ``#neg``;
    where the file has that id already (a question of its own named so), the first of
    ``#neg2``, ``#neg3``, ... that no question or other negative has. The directory is built
    beside ``out`` and renamed into place at the end, so a failed run leaves no half-written
    ``out``.
    """
    if negatives not in (None, "same_article"):
        raise ValueError(f"negatives must be None or 'same_article', not {negatives!r}")
    limits = limits or Limits()
    out = Path(out)
    for path in (Path(train), Path(dev), Path(vectors)):  # before minutes of tokenising
        if not path.is_file():
            raise FileNotFoundError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    spacy_pair = find_spacy_pair(vectors)  # a spaCy table's partner file, likewise
    check_replaceable(
        out,
        overwrite,
        lambda meta: meta.get("format") == "treeqa-squad",
        "data prepare squad",
        written=WRITTEN,
        inputs=[Path(train), Path(dev), Path(vectors), *(spacy_pair or ())]
        + ([Path(vectors_cache)] if vectors_cache else []),
    )
    say = log or (lambda _: None)
    with built_aside(out) as work:
        tok, types = Tokenizer(), TokenTypes()
        writers, stats = {}, {}
        for split, path in (("train", Path(train)), ("dev", Path(dev))):
            w = SplitWriter(work / split, split, limits, negatives, negative_fraction, seed)
            st = ReadStats()
            for article in iter_articles(path, skip_bad=skip_bad, stats=st):
                w.add(article, tok, types)
            if not w.counts["examples"]:  # a split with nothing to train or score on
                dropped = {k[8:]: v for k, v in w.counts.items() if k.startswith("dropped_")}
                raise ValueError(
                    f"{path}: no {split} example kept of {st.questions} questions read "
                    f"(dropped by the limits: {dropped or 'none'}; skipped: "
                    f"{dict(st.skipped) or 'none'})"
                )
            w.finish_pass1(st.squad_version)
            writers[split], stats[split] = w, st
            skipped = sum(st.skipped.values())
            read = f"{st.questions + skipped} questions read" + (
                f" ({skipped} skipped)" if skipped else ""
            )
            if st.unreadable:
                read += f", {sum(st.unreadable.values())} unreadable articles or paragraphs skipped"
            say(f"{split}: {read}, {w.counts['examples']} examples kept")
            said = str(st.version or "").lstrip("v")
            if st.has_impossible and said and not said.startswith("2"):
                say(
                    f"note: {path} says version {st.version} but has questions marked "
                    '"is_impossible" (SQuAD 2.0\'s layout): read and scored as SQuAD 2.0'
                )
            if st.squad_version == "v2.0" and not st.has_impossible:
                say(
                    f"note: {path} says version {st.version} but no question has "
                    '"is_impossible": read as SQuAD 2.0 whose every question has an answer '
                    "(the no-answer slot trains on none)"
                )
        n = len(types.strings)
        split_counts = {
            s: np.bincount(w.ctx_tids.memmap(), minlength=n)
            + np.bincount(w.q_tids.memmap(), minlength=n)
            for s, w in writers.items()
        }
        words, chars, matrix, type_words, report = build_vocabularies(
            types.strings,
            split_counts["train"] + split_counts["dev"],
            split_counts["train"],
            Path(vectors),
            seed,
            Path(vectors_cache) if vectors_cache else None,
        )
        type_chars = np.zeros((n, limits.chars), np.uint16)  # [types, W]
        for i, t in enumerate(types.strings):
            ids = chars.ids(t[: limits.chars])
            type_chars[i, : len(ids)] = ids
        for w in writers.values():
            w.finish_pass2(type_words, type_chars)
        words.save(work / "word_vocab.json")
        chars.save(work / "char_vocab.json")
        np.save(work / "word_vectors.npy", matrix)
        meta = _meta(
            tok,
            stats,
            writers,
            limits,
            words,
            chars,
            matrix,
            report,
            train,
            dev,
            skip_bad,
            negatives,
            negative_fraction,
            seed,
        )
        # What a reader checks its files against: a byte changed on disk or in a copy may
        # leave an id in its vocabulary's range, to be read as another word.
        meta["crc32"] = {}
        for path in sorted(p for p in work.rglob("*") if p.is_file()):
            with path.open("rb") as f:
                meta["crc32"][path.relative_to(work).as_posix()] = crc32(f)
        (work / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    say(f"wrote {out}: {len(words)} words, {len(chars)} chars, vectors {matrix.shape}")
    return meta


def _meta(
    tok: Tokenizer,
    stats: dict[str, ReadStats],
    writers: dict[str, SplitWriter],
    limits: Limits,
    words: Vocab,
    chars: Vocab,
    matrix: np.ndarray,
    report: dict[str, Any],
    train: str | Path,
    dev: str | Path,
    skip_bad: bool,
    negatives: str | None,
    negative_fraction: float,
    seed: int,
) -> dict[str, Any]:
    splits = {}
    for (split, st), path in zip(stats.items(), (train, dev), strict=True):
        w = writers[split]
        c = w.counts
        splits[split] = {
            "source": file_info(Path(path)),
            "version": st.squad_version,
            "articles": st.articles,
            "paragraphs_read": st.paragraphs,
            "questions_read": st.questions,
            "unanswerable_read": st.unanswerable,
            "skipped": dict(st.skipped),
            "unreadable": dict(st.unreadable),
            "examples": c["examples"],
            "paragraphs": c["paragraphs"],
            "dropped": {k[8:]: v for k, v in sorted(c.items()) if k.startswith("dropped_")},
            "negatives": c["negatives"],
            "negatives_not_made": {
                k[10:]: v for k, v in c.items() if k.startswith("negatives_") and v
            },
            "unanswerable_examples": c["examples_no_answer"],
            "answers": c["answers"],
            "answers_not_whole_tokens": c["answers_inexact"],
            "context_tokens": w.n_ctx,
            "question_tokens": w.n_q,
            "max_context_tokens": w.max_len["context"],
            "max_question_tokens": w.max_len["question"],
        }
    versions = {s["version"] for s in splits.values()}
    return {
        "format": "treeqa-squad",
        "format_version": FORMAT_VERSION,
        "version": "v2.0" if "v2.0" in versions else "v1.1",
        "treeqa_version": __version__,
        "tokenizer": tok.about,
        "limits": asdict(limits),
        "options": {
            "skip_bad": skip_bad,
            "negatives": negatives,
            "negative_fraction": negative_fraction,
            "seed": seed,
        },
        "vocab": {
            "words": len(words),
            "chars": len(chars),
            "vector_dim": int(matrix.shape[1]),
            "vectors": report,
        },
        "splits": splits,
    }
