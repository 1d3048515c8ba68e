"""SQuAD v1.1 / v2.0 reading, tokenisation with character offsets and answer-span mapping.

The reader is a pure function over a path (``.json`` or ``.json.gz``). It decodes one article
at a time from the file text, so memory holds the raw text plus one parsed article instead of
the whole parsed tree (which costs about ten times the file size in Python objects).
Featurisation to arrays lives in :mod:`treeqa.data.squad_prepare`; memory-mapped reading of a
prepared directory in :mod:`treeqa.data.squad_prepared`.

Shape letters: T tokens of one text.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "Answer",
    "Article",
    "Paragraph",
    "Question",
    "ReadStats",
    "SquadFormatError",
    "Tokenizer",
    "answer_token_span",
    "import_spacy",
    "iter_articles",
    "read_json_text",
    "visible",
]

_JSON_SPACE = re.compile(r"[ \t\n\r]*")


def _ids(qas: list[Any]) -> str:
    """The ids of a paragraph's questions, for an error that drops them all: " (3 questions:
    'q1', 'q2', 'q3')", the first 3 named."""
    ids = [q.get("id") for q in qas if isinstance(q, dict) and isinstance(q.get("id"), str | int)]
    named = ", ".join(repr(str(i)) for i in ids[:3]) + (", ..." if len(ids) > 3 else "")
    return f" ({len(qas)} question{'s' if len(qas) != 1 else ''}" + (f": {named})" if ids else ")")


class SquadFormatError(ValueError):
    """Malformed SQuAD data, located by file (``file:line:col`` for JSON syntax errors), article
    index (``data[3]``, from 0 as in the JSON) and title, paragraph index and question id where
    known."""

    def __init__(
        self,
        message: str,
        source: str | Path,
        *,
        line: int | None = None,
        column: int | None = None,
        article: int | None = None,
        title: str | None = None,
        question_id: str | None = None,
        paragraph: int | None = None,
    ):
        self.source, self.line, self.column = str(source), line, column
        self.article, self.title, self.question_id = article, title, question_id
        self.paragraph = paragraph
        self.reason = message
        where = f"{source}:{line}:{column}" if line is not None else str(source)
        parts = []
        if article is not None:
            parts.append(f"data[{article}]" + (f" ({title!r})" if title else ""))
        if paragraph is not None:
            parts.append(f"paragraphs[{paragraph}]")
        if question_id is not None:
            parts.append(f"question {question_id!r}")
        super().__init__(f"{where}: " + "".join(p + ": " for p in parts) + message)


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset in the context


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    answers: tuple[Answer, ...]  # empty when unanswerable (v2.0)

    @property
    def is_impossible(self) -> bool:
        return not self.answers


@dataclass(frozen=True)
class Paragraph:
    context: str
    questions: tuple[Question, ...]


@dataclass(frozen=True)
class Article:
    index: int  # position in the file's "data" list, counting skipped articles
    title: str
    paragraphs: tuple[Paragraph, ...]


@dataclass
class ReadStats:
    """What :func:`iter_articles` saw; filled while iterating."""

    version: str | None = None  # the file's "version" field
    has_impossible: bool = False  # some question carries "is_impossible" (v2.0 layout)
    articles: int = 0
    paragraphs: int = 0
    questions: int = 0
    unanswerable: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> questions skipped
    # reason -> articles or paragraphs skipped whose questions could not be counted
    unreadable: Counter[str] = field(default_factory=Counter)

    @property
    def squad_version(self) -> str:
        """The SQuAD version: "v2.0" or "v1.1"."""
        v2 = self.has_impossible or str(self.version or "").lstrip("v").startswith("2")
        return "v2.0" if v2 else "v1.1"


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict (``json.loads``'s ``object_pairs_hook``), or a KeyError naming a
    key given twice in it: the last value would win, silently."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise KeyError(key)
        seen.add(key)
    return dict(pairs)


def no_constant(name: str) -> float:
    """``json.loads``'s ``parse_constant``: Python reads NaN, Infinity and -Infinity, which are
    no JSON, and would write them back as such into output that JSON readers then refuse."""
    raise ValueError(f"{name} is not a JSON number")


def finite_float(text: str) -> float:
    """``json.loads``'s ``parse_float``: a number too large for a float (1e999) is read as
    infinity, and written back as Infinity, which is no JSON."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:20]} is out of range for a float")
    return value


def json_beyond_syntax(err: RecursionError | ValueError) -> str:
    """What ``json.loads`` raised besides a syntax error, in words: text nested deeper than
    Python's recursion limit, or an integer longer than ``int()`` converts (4,300 digits)."""
    if isinstance(err, RecursionError):
        return "JSON nested too deeply"
    if "integer string conversion" in str(err):  # (Python's words name its own setting)
        return f"invalid JSON: an integer longer than {sys.get_int_max_str_digits():,} digits"
    return f"invalid JSON: {err}"


def read_json_text(path: str | Path) -> str:
    """The text of a JSON file, gunzipped when it starts with the gzip magic number."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return raw.decode("utf-8-sig")
    except (OSError, EOFError, zlib.error) as err:  # zlib.error: a damaged gzip stream
        raise SquadFormatError(f"cannot read the file ({err})", path) from err
    except UnicodeDecodeError as err:
        # Where an editor shows it (line, column), not only the byte's offset. err.object is
        # what was decoded: the text gunzipped, a byte-order mark left out.
        text, bad = err.object, err.start
        before = text[text.rfind(b"\n", 0, bad) + 1 : bad].decode("utf-8", "replace")
        raise SquadFormatError(
            f"not UTF-8 text ({err.reason})",
            path,
            line=text.count(b"\n", 0, bad) + 1,
            column=len(before) + 1,
        ) from err


def _location(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def iter_articles(
    path: str | Path, *, skip_bad: bool = False, stats: ReadStats | None = None
) -> Iterator[Article]:
    """The articles of a SQuAD file, in file order, one parsed at a time.

    Broken JSON always raises :class:`SquadFormatError` with ``file:line:col``. A malformed
    article, paragraph or question, a duplicate id, or an answer whose text is not at its
    ``answer_start`` raises too, naming the article and question; with ``skip_bad`` it is
    dropped instead and counted in ``stats.skipped`` (by reason, in questions).
    """
    stats = stats if stats is not None else ReadStats()
    text, source = read_json_text(path), str(path)
    decoder = json.JSONDecoder(object_pairs_hook=unique_keys)
    checker = _Checker(source, skip_bad, stats)

    def fail(message: str, pos: int) -> SquadFormatError:
        line, column = _location(text, pos)
        return SquadFormatError(message, source, line=line, column=column)

    def space(pos: int) -> int:
        match = _JSON_SPACE.match(text, pos)
        return match.end() if match else pos

    def expect(pos: int, chars: str) -> tuple[str, int]:
        pos = space(pos)
        if pos >= len(text) or text[pos] not in chars:
            got = repr(text[pos]) if pos < len(text) else "end of file"
            raise fail(f"expected {' or '.join(repr(c) for c in chars)}, got {got}", pos)
        return text[pos], space(pos + 1)

    def value(pos: int) -> tuple[Any, int]:
        try:
            return decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise fail(err.msg, err.pos) from None
        except (RecursionError, ValueError) as err:  # 100,000 "[" in a row; a 5,000-digit int
            raise fail(json_beyond_syntax(err), space(pos)) from None
        except KeyError as err:  # unique_keys: the last value would win, silently
            raise fail(
                f"a field is given twice ({err.args[0]!r}) in the value here", space(pos)
            ) from None

    _, pos = expect(0, "{")
    keys: set[str] = set()  # at the top level, read by hand: checked as unique_keys would
    if text.startswith("}", pos):
        pos += 1
    else:
        while True:
            at = space(pos)
            key, pos = value(pos)
            if not isinstance(key, str):
                raise fail("expected a field name in double quotes", at)
            if key in keys:  # a second "data" list was read as more articles
                raise fail(f"a field is given twice ({key!r}) at the top level", at)
            keys.add(key)
            _, pos = expect(pos, ":")
            if key == "data":
                _, pos = expect(pos, "[")
                index, close = 0, text.startswith("]", pos)
                pos += close
                while not close:
                    raw, pos = value(pos)
                    article = checker.article(raw, index)
                    if article is not None:
                        yield article
                    index += 1
                    sep, pos = expect(pos, ",]")
                    close = sep == "]"
            else:
                found, pos = value(pos)
                if key == "version":
                    stats.version = str(found)
            sep, pos = expect(pos, ",}")
            if sep == "}":
                break
    if space(pos) != len(text):
        raise fail("extra data after the top-level object", space(pos))
    if "data" not in keys:
        raise SquadFormatError('no "data" list at the top level', source)


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate (JSON's ``"\\ud800"`` unpaired): no character, and not UTF-8 encodable."""


def visible(text: str) -> bool:
    """Whether ``text`` has a character that shows: one that is neither a separator (Unicode
    category Z*: spaces, line breaks) nor an "other" (C*: controls, zero-width and other
    format characters). Text without one is empty to a reader, whatever tokens it makes."""
    return any(unicodedata.category(c)[0] not in "ZC" for c in text)


class _Checker:
    """Turns decoded JSON into checked dataclasses; raises or counts what is malformed."""

    def __init__(self, source: str, skip_bad: bool, stats: ReadStats):
        self.source, self.skip_bad, self.stats = source, skip_bad, stats
        self.ids: set[str] = set()

    def _bad(
        self,
        reason: str,
        count: int,
        index: int,
        title: str,
        qid: str | None = None,
        detail: str = "",
        paragraph: int | None = None,
    ) -> None:
        """Raise ``reason`` (with ``detail``, where it helps to find the fault), or count it."""
        if not self.skip_bad:
            raise SquadFormatError(
                f"{reason}{detail}",
                self.source,
                article=index,
                title=title or None,
                question_id=qid,
                paragraph=paragraph,
            )
        if count:
            self.stats.skipped[reason] += count
        else:  # no "paragraphs" or "qas" list to count the questions of
            self.stats.unreadable[reason] += 1

    def article(self, raw: Any, index: int) -> Article | None:
        title = raw.get("title", "") if isinstance(raw, dict) else ""
        title = title if isinstance(title, str) else ""
        paras = raw.get("paragraphs") if isinstance(raw, dict) else None
        if not isinstance(paras, list):
            self._bad('malformed article (needs a "paragraphs" list)', 0, index, title)
            return None
        kept = []
        for k, p in enumerate(paras):
            qas = p.get("qas") if isinstance(p, dict) else None
            if not isinstance(qas, list) or not isinstance(p.get("context"), str):
                count = len(qas) if isinstance(qas, list) else 0
                self._bad(
                    'malformed paragraph (needs "context" text and a "qas" list)',
                    count,
                    index,
                    title,
                    paragraph=k,
                )
                continue
            if not visible(p["context"]):  # nothing to answer from, or to attend over
                if qas:
                    asked = _ids(qas)
                    self._bad("empty context", len(qas), index, title, None, asked, k)
                continue
            if _SURROGATE.search(p["context"]):
                reason = r"a lone surrogate (\ud800-\udfff) in the context"
                self._bad(reason, len(qas), index, title, None, _ids(qas), k)
                continue
            qs = [q for q in (self.question(r, p["context"], index, title) for r in p["qas"]) if q]
            kept.append(Paragraph(p["context"], tuple(qs)))
        self.stats.articles += 1
        self.stats.paragraphs += len(kept)
        return Article(index, title, tuple(kept))

    def question(self, raw: Any, context: str, index: int, title: str) -> Question | None:
        qid = raw.get("id") if isinstance(raw, dict) else None
        qid = str(qid) if isinstance(qid, str | int) and not isinstance(qid, bool) else None
        if qid is None or not isinstance(raw.get("question"), str):
            self._bad('malformed question (needs "id" and "question" text)', 1, index, title, qid)
            return None
        impossible = raw.get("is_impossible", False)
        answers = raw.get("answers", [])
        if "is_impossible" in raw:
            self.stats.has_impossible = True
        reason = None
        if not isinstance(impossible, bool) or not isinstance(answers, list):
            reason = 'malformed question ("answers" must be a list, "is_impossible" true/false)'
        elif not visible(raw["question"]):
            reason = "empty question"
        elif _SURROGATE.search(raw["question"]):
            reason = r"a lone surrogate (\ud800-\udfff) in the question"
        elif qid in self.ids:
            reason = "duplicate question id"
        elif impossible and answers:
            reason = "an unanswerable question has answers"
        elif not impossible and not answers:
            reason = 'no answers (mark unanswerable questions with "is_impossible": true)'
        checked: list[Answer] = []
        detail = ""
        for a in answers if reason is None else ():
            text, start = (a.get("text"), a.get("answer_start")) if isinstance(a, dict) else (0, 0)
            if not isinstance(text, str) or not isinstance(start, int) or isinstance(start, bool):
                reason = 'malformed answer (needs "text" and an integer "answer_start")'
            elif start < 0 or not text.strip() or context[start : start + len(text)] != text:
                reason = "answer not in its context at answer_start"
                detail = nearest(context, text, start)
            else:
                checked.append(Answer(text, start))
                continue
            break
        if reason is not None:
            self._bad(reason, 1, index, title, qid, detail)
            return None
        self.ids.add(qid)
        self.stats.questions += 1
        self.stats.unanswerable += bool(impossible)
        return Question(qid, raw["question"], tuple(checked))


def nearest(context: str, text: str, start: int) -> str:
    """Where an answer's ``text`` does occur in ``context``, said after an ``answer_start``
    that misses it (often off by a few characters, or counted in another encoding)."""
    found = [m.start() for m in re.finditer(re.escape(text), context)] if text.strip() else []
    if not found:
        return f" ({text!r} does not occur in the context)"
    at = min(found, key=lambda p: abs(p - start))
    return f" {start} ({text!r} is at {at}, {at - start:+d} characters)"


def import_spacy(missing: str) -> Any:
    """``spacy``, imported on first use (an optional dependency); ``missing``: the ImportError's
    message when it is not installed, which says how to get it."""
    try:
        import spacy
    except ModuleNotFoundError as err:
        if err.name != "spacy":
            # Installed, but it imports a module it does not require: spaCy 3.7.5 to 3.8.14
            # import click, which newer typer releases (their CLI's dependency) no longer bring.
            raise ImportError(
                f"spaCy is installed but fails to import: {err} (pip install 'treeqa[qa]' "
                "installs spaCy with the modules it imports)"
            ) from err
        raise ImportError(missing) from err
    return spacy


class Tokenizer:
    """spaCy's rule-based English tokenizer (``spacy.blank("en")``) with character offsets.

    Whitespace tokens (runs of spaces, newlines) are dropped: they carry no answer text and
    would waste positions of the 400-token context budget.
    """

    def __init__(self) -> None:
        spacy = import_spacy(
            "SQuAD tokenisation needs spaCy: pip install 'treeqa[qa]' (or spacy>=3.7)"
        )
        from spacy.attrs import IDX, IS_SPACE, LENGTH, ORTH

        # Typed Any: spaCy's stubs call the tokenizer a plain function, which has no .pipe.
        self._tokenizer: Any = spacy.blank("en").tokenizer
        self.about = {"name": 'spacy.blank("en").tokenizer', "spacy_version": spacy.__version__}
        """What tokenises: a prepared folder's meta.json records it (its rules change between
        spaCy versions)."""
        self._attrs = [IDX, LENGTH, IS_SPACE, ORTH]

    def pipe(
        self, texts: Iterable[str], batch_size: int = 256
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Per text: ``spans`` [T, 2] int32 character (start, end) and ``orth`` [T] uint64
        (spaCy's hash of the token text: equal hashes mean equal tokens)."""
        for doc in self._tokenizer.pipe(texts, batch_size=batch_size):
            a = doc.to_array(self._attrs).reshape(-1, 4)  # [T_all, 4] uint64
            a = a[a[:, 2] == 0]
            a[:, 1] += a[:, 0]  # (start, length) -> (start, end)
            yield a[:, :2].astype(np.int32), a[:, 3]

    @property
    def strings(self) -> int:
        """Strings spaCy has interned: it adds each new token text and never drops one."""
        return len(self._tokenizer.vocab.strings)

    def tokenize(self, text: str) -> tuple[list[str], np.ndarray]:
        """(tokens, spans [T, 2]) of one text."""
        spans, _ = next(self.pipe([text]))
        return [text[s:e] for s, e in spans.tolist()], spans


def answer_token_span(
    spans: np.ndarray, context: str, start: int, end: int
) -> tuple[int, int, bool] | None:
    """First and last (inclusive) tokens that overlap characters ``[start, end)``, and whether
    the answer, less surrounding whitespace, begins and ends exactly at token edges.
    None when no token overlaps (an answer made of whitespace only)."""
    y1 = int(np.searchsorted(spans[:, 1], start, side="right"))
    y2 = int(np.searchsorted(spans[:, 0], end, side="left")) - 1
    if y1 > y2:
        return None
    text = context[start:end]
    s = start + len(text) - len(text.lstrip())
    e = end - (len(text) - len(text.rstrip()))
    return y1, y2, bool(spans[y1, 0] == s and spans[y2, 1] == e)
