"""Pretrained word vectors, filtered to a vocabulary while streaming and cached as ``.npy``.

Two on-disk layouts are read:

- GloVe text (plain or ``.gz``): ``word v1 ... vD`` per line. Tokens may contain spaces (as in
  glove.840B), so the last D fields are the numbers and everything before them is the token;
  D comes from the first line (or a word2vec ``count D`` header) unless the caller gives it.
- A spaCy table: ``<prefix>.vectors.<...>.npy`` (optionally ``.xz``), a [R, D] array, plus
  ``<prefix>.key2row.tsv`` (optionally ``.gz``) with ``word<TAB>row`` lines. Either file of the
  pair may be passed; the other is found by name.

Shape letters: V vocabulary rows (``len(keys)``), D vector width, R rows of a spaCy table.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import tempfile
import time
import tokenize
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = [
    "CoverageReport",
    "VectorFileError",
    "Vectors",
    "find_spacy_pair",
    "fingerprint",
    "load_vectors",
]

CACHE_VERSION = 4  # bump when the reader's output changes, so old caches miss
_EXAMPLES = 10
_FINGERPRINT = 1 << 20  # bytes hashed at each end of a vectors file for the cache key
_ENTRY = re.compile(r".+\.[0-9a-f]{24}\.json")  # a cache entry's JSON, the last file written
_PARTIAL = re.compile(r".+\.[0-9a-f]{24}[a-z0-9_]{8}\.tmp")  # a cache file being written
_STALE = 6 * 3600  # seconds: a temporary untouched this long is a dead writer's
_UNUSED = 30 * 86400  # seconds: an entry naming no source, unread this long, is deleted
_DECODE_ERRORS = (EOFError, gzip.BadGzipFile, lzma.LZMAError, zlib.error)
NPY_HEADER_ERRORS = (ValueError, TypeError, SyntaxError, tokenize.TokenError)
"""What numpy raises for a damaged .npy header: a ValueError mostly, but the header is a
Python literal, and one garbled may fail in the tokenizer numpy falls back to (TokenError,
IndentationError) or hold an unhashable key (TypeError)."""
_CORRUPT = "cannot decompress ({}): the file is truncated or corrupt"
_NOT_FINITE = "holds NaN, infinity or a number too large for float32"
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark, as Windows editors write it
_ZIP = b"PK\x03\x04"  # a zip archive's first bytes: GloVe and fastText files ship zipped
_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]")  # in no text line, often in floats


class VectorFileError(ValueError):
    """A malformed, truncated or incomplete vectors file, located as ``file:line`` when known."""

    def __init__(self, message: str, source: str | Path, line: int | None = None):
        self.source, self.line, self.reason = str(source), line, message
        super().__init__(f"{source}:{line}: {message}" if line else f"{source}: {message}")


@dataclass(frozen=True)
class CoverageReport:
    """How many vocabulary rows the file covered. ``rows = exact + lower + missing + padding``."""

    source: str  # file name of the vectors file
    rows: int
    exact: int  # found under the key itself
    lower: int  # found only under the lower-cased key
    missing: int  # got a random vector
    padding: int  # None keys, left at zero
    bad_lines: int  # malformed lines skipped (on_bad_line="skip")
    lines_read: int
    missing_examples: tuple[str, ...]
    distinct: int = 0
    """Distinct vectors among the found keys."""
    shared: int = 0
    """Found keys whose vector another found key also has, not counting case variants of
    the same word: a pruned table (spaCy's md vectors) maps many words onto one row."""
    shared_examples: tuple[tuple[str, ...], ...] = ()
    """A few groups of words that share one vector, most frequent key first."""
    unended: bool = False
    """The last line has no newline: whole, or cut inside its last number (which no check
    can tell apart: the words after it missing, its last component wrong)."""

    def summary(self) -> str:
        wanted, found = self.rows - self.padding, self.exact + self.lower
        share = 100.0 * found / max(wanted, 1)
        examples = ", ".join(map(repr, self.missing_examples[:5]))
        examples = f" (e.g. {examples})" if examples else ""
        return (
            f"{self.source}: {found}/{wanted} keys found ({share:.1f}%: {self.exact} exact, "
            f"{self.lower} lower-case), {self.missing} missing{examples}, {self.padding} padding; "
            f"{self.lines_read} lines read, {self.bad_lines} bad lines skipped"
            + (
                f". NOTE: line {self.lines_read} has no newline; if the file was cut there, "
                "its last number is wrong and the words after it are missing"
                if self.unended
                else ""
            )
            + self._shared_summary(found)
        )

    def _shared_summary(self, found: int) -> str:
        if not self.shared:
            return ""
        groups = "; ".join(" = ".join(map(repr, g)) for g in self.shared_examples[:3])
        return (
            f". WARNING: the {found} found keys hold only {self.distinct} distinct vectors;"
            f" {self.shared} keys share theirs with a different word (e.g. {groups}), so those"
            " words start indistinguishable"
        )


@dataclass(frozen=True, eq=False)
class Vectors:
    """Row i belongs to ``keys[i]``."""

    matrix: np.ndarray  # [V, D] float32; random rows where not found, zeros for None keys
    found: np.ndarray  # [V] bool
    report: CoverageReport


def load_vectors(
    path: str | Path,
    keys: Sequence[str | None],
    *,
    lower_fallback: bool = True,
    cache_dir: str | Path | None = None,
    on_bad_line: str = "error",
    seed: int = 0,
    oov_scale: float = 0.05,
    dim: int | None = None,
) -> Vectors:
    """Vectors for ``keys[i]`` in row i: a [V, D] float32 matrix and a [V] found mask.

    A key is looked up as written, then (``lower_fallback``) lower-cased. Keys not in the file
    get uniform(-oov_scale, oov_scale) rows from ``np.random.default_rng(seed)``; None keys
    (padding) get zeros. ``dim`` (D) is read from the first line unless given. A malformed
    line raises :class:`VectorFileError`, or with ``on_bad_line="skip"`` is counted and
    skipped; a file cut inside a line raises (its last line is short, or a word2vec header's
    count is unmet), except one cut inside its last number: that the last line has no newline
    is said in the report (``unended``). Numbers are checked only on the lines kept.

    The result is cached in ``cache_dir`` (default: ``.treeqa-cache`` beside the file, or
    ``~/.cache/treeqa/vectors`` when that folder is read-only), keyed by the file's path,
    size, mtime and first and last MiB and by every argument; a corrupt cache is rebuilt
    (with a warning naming the file where its arrays or report fail the CRC-32s written with
    them).
    Writing an entry deletes those of earlier versions of the same file (other keys of this
    version stay), and the temporaries of writers that died part-way.
    """
    if on_bad_line not in ("error", "skip"):
        raise ValueError(f"on_bad_line must be 'error' or 'skip', not {on_bad_line!r}")
    path = Path(path)
    pair = find_spacy_pair(path)
    settings = [lower_fallback, seed, oov_scale, on_bad_line, dim]
    digest, source = _cache_key(pair or (path,), keys, settings)
    folder = _cache_folder(path, cache_dir)
    stem = folder / f"{path.name}.{digest}" if folder is not None else None
    cached = _read_cache(stem, len(keys)) if stem is not None else None
    if cached is not None:
        return cached

    wanted = {k.encode() for k in keys if k is not None}
    if lower_fallback:
        wanted |= {k.lower().encode() for k in keys if k is not None}
    skip = on_bad_line == "skip"
    if pair is None:
        dim, vecs, lines, bad, unended = _read_glove(path, wanted, dim, skip)
    else:
        dim, vecs, lines, bad, unended = _read_spacy(*pair, wanted, dim, skip)
    matrix, found, report = _assemble(keys, vecs, dim, lower_fallback, seed, oov_scale)
    report = replace(report, source=path.name, bad_lines=bad, lines_read=lines, unended=unended)
    vectors = Vectors(matrix, found, report)
    if stem is not None:
        _write_cache(stem, vectors, source)
    return vectors


def width(path: str | Path) -> int | None:
    """D of a vectors file from its first line (or a spaCy table's header), as the loader
    reads it; None when that line does not tell (the loader then says why, with its line)."""
    path = Path(path)
    pair = find_spacy_pair(path)
    try:
        if pair is not None:
            with _open(pair[0]) as f:
                return _npy_header(f, pair[0])[1]
        for _, raw in _lines(path):
            fields = raw.split()
            if len(fields) == 2 and all(f.isdigit() for f in fields):  # word2vec "count D"
                return int(fields[1])
            return len(fields) - 1 if len(fields) > 1 else None
    except (OSError, VectorFileError):
        return None
    return None


def find_spacy_pair(path: str | Path) -> tuple[Path, Path] | None:
    """``(table, key2row)`` when ``path`` names either file of a spaCy pair, else None (text).

    Raises :class:`VectorFileError` when the partner file is missing or ambiguous.
    """
    path = Path(path)
    if m := re.fullmatch(r"(.+)\.key2row\.tsv(?:\.gz)?", path.name):
        suffixes = [".vectors*.npy", ".vectors*.npy.xz", ".npy", ".npy.xz"]
    elif m := re.fullmatch(r"(.+?)(?:\.vectors.*)?\.npy(?:\.xz)?", path.name):
        suffixes = [".key2row.tsv", ".key2row.tsv.gz"]
    else:
        return None
    prefix = glob.escape(m[1])
    # A link to one file of a pair: the partner may lie beside the file it names instead.
    folders = [path.parent] + ([path.resolve().parent] if path.is_symlink() else [])
    partners = []
    for folder in folders:
        partners = sorted({p for s in suffixes for p in folder.glob(prefix + s)})
        if partners:
            break
    if len(partners) != 1:
        looked = ", ".join(m[1] + s for s in suffixes)
        found = ", ".join(p.name for p in partners) or "none"
        problem = f"a spaCy vectors file needs exactly one partner file, found {found}"
        where = " or ".join(map(str, folders))
        raise VectorFileError(f"{problem}: looked for {looked} in {where}", path)
    partner = partners[0]
    return (partner, path) if "key2row" in path.name else (path, partner)


# --- reading -------------------------------------------------------------------------------


def _open(path: Path) -> io.BufferedIOBase:
    """The file, decompressed by its suffix; opened once, its first bytes peeked at, not read
    (a named pipe would lose them to a second open, which then waits for a writer forever)."""
    f = path.open("rb")
    if f.peek(len(_ZIP))[: len(_ZIP)] == _ZIP:  # else it reads as a line of binary fields
        f.close()
        raise VectorFileError("a zip archive: unzip it and give the vectors file inside", path)
    if path.suffix not in (".gz", ".xz"):
        return f
    # GzipFile.readline is Python code; a C buffer on top reads lines three times faster.
    stream = gzip.GzipFile(fileobj=f) if path.suffix == ".gz" else lzma.LZMAFile(f)
    return io.BufferedReader(_Chunks(stream, f), buffer_size=1 << 20)


class _Chunks(io.RawIOBase):
    """Hands on one decompressed chunk at a time (``read1``), so a truncated stream fails
    only after every complete line before the cut was read, and the error names that line.
    ``raw``: the compressed file, closed with it (the decompressor leaves a file it was given
    open)."""

    def __init__(self, stream: io.BufferedIOBase, raw: io.BufferedIOBase):
        self.stream, self.raw = stream, raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.stream.read1(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.stream.close()
        self.raw.close()
        super().close()


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Numbered raw lines, split on ``\\n`` only (840B tokens hold ``\\r`` and invalid UTF-8)."""
    number = 0
    with _open(path) as f:
        try:
            for number, raw in enumerate(f, start=1):
                # Else the BOM would join the first token, and that word would go missing.
                yield number, raw.removeprefix(_BOM) if number == 1 else raw
        except _DECODE_ERRORS as err:
            raise VectorFileError(_CORRUPT.format(err), path, number + 1) from err


class _BadLines:
    """Raises on a malformed line, or counts it when the caller chose to skip them."""

    def __init__(self, path: Path, skip: bool):
        self.path, self.skip, self.count = path, skip, 0

    def __call__(self, reason: str, number: int, raw: bytes) -> None:
        if not raw.endswith(b"\n"):
            # A bad last line with no newline is a cut-off download, not one stray line.
            reason += "; the last line has no newline, so the file looks truncated"
            raise VectorFileError(reason, self.path, number)
        if not self.skip:
            raise VectorFileError(reason, self.path, number)
        self.count += 1


@np.errstate(over="ignore")  # "1e99" becomes inf, refused below: no RuntimeWarning first
def _read_glove(
    path: Path, wanted: set[bytes], dim: int | None, skip: bool
) -> tuple[int, dict[bytes, np.ndarray], int, int, bool]:
    """(D, {token: [D] vector} for the wanted tokens, lines read, bad lines skipped, whether
    the last line has no newline)."""
    bad = _BadLines(path, skip)
    vecs: dict[bytes, np.ndarray] = {}
    number, raw = 0, b"\n"
    promised = header = None  # the vector count of a word2vec header, and its line
    told = "as asked"  # where D came from, for messages
    blank: tuple[int, bytes] | None = None  # the first of the blank lines just read
    for number, raw in _lines(path):
        line = raw.rstrip(b"\r\n ")
        if not line.strip():  # blank lines at the end (an editor's extra newline): no vectors
            blank = blank or (number, raw)
            continue
        if blank is not None:  # but between vectors, one is a damaged line
            where = f"({told})" if dim is not None else "(as on the lines after it)"
            bad(f"expected a token and its numbers {where}, found an empty line", *blank)
            blank = None
        spaces = line.count(b" ")
        if dim is None:
            dim, told, promised = _first_width(path, line, number)
            if promised is not None:
                header = number
                continue
        if number - 1 == header and _binary(line[line.find(b" ") + 1 :]):
            # Else its bytes read as a short line and the file is said to be truncated.
            raise VectorFileError(
                f"binary data after the word2vec header on line {header}: a word2vec binary "
                "file (.bin)? Vectors are read from text, a token and its numbers per line; "
                "convert it first, e.g. with gensim's save_word2vec_format(..., binary=False)",
                path,
                number,
            )
        if spaces < dim:
            found = f"{spaces + 1} fields" if line else "an empty line"
            bad(f"expected a token and {dim} numbers ({told}), found {found}", number, raw)
            continue
        # Checking only the width of unwanted lines keeps a 2M-line file fast to stream.
        token = line[: line.find(b" ")] if spaces == dim else line.rsplit(b" ", dim)[0]
        if spaces > dim and _looks_like_numbers(token.split(b" ")[1:]):
            # Not a token with spaces (GloVe 840B has some) but a row of another width.
            bad(f"expected a token and {dim} numbers ({told}), found {spaces}", number, raw)
            continue
        if token not in wanted or token in vecs:  # the first of duplicate tokens wins
            continue
        numbers = line[len(token) + 1 :]
        try:
            if b"_" in numbers:  # Python's float takes "1_0" for 10; no vector file writes it
                raise ValueError("'_' inside a number")
            vec = np.array(numbers.split(b" "), dtype=np.float32)  # [D]
        except ValueError as err:
            bad(f"a non-numeric field among the last {dim}: {err}", number, raw)
            continue
        if not np.isfinite(vec).all():
            bad(f"the vector {_NOT_FINITE}", number, raw)
            continue
        vecs[token] = vec
    if dim is None or number == 0:
        raise VectorFileError("empty file: no vectors", path)
    last = blank[0] - 1 if blank is not None else number  # blank lines at the end hold none
    if promised is not None and header is not None and last - header < promised:
        # Cut at a line boundary, the text itself looks whole: only the header tells.
        raise VectorFileError(
            f"the header on line {header} promises {promised} vectors, but the file ends after "
            f"{last - header}: it looks truncated (if it was cut on purpose, fix the header)",
            path,
        )
    return dim, vecs, number, bad.count, not raw.endswith(b"\n")


def _first_width(path: Path, line: bytes, number: int) -> tuple[int, str, int | None]:
    """(D, where D came from for messages, the vector count of a word2vec / fastText
    "count D" header or None) from the first non-blank ``line``, line ``number`` of ``path``."""
    spaces = line.count(b" ")
    if spaces == 0 and b"\t" in line:
        raise VectorFileError(
            "the first line's fields are separated by tabs; a GloVe or word2vec text "
            "file separates a token and its numbers by single spaces",
            path,
            1,
        )
    if spaces == 0:
        raise VectorFileError("the first line holds no numbers; cannot tell D", path, 1)
    count, _, width = line.partition(b" ")
    if count.isdigit() and width.isdigit():
        return int(width), f"as the header on line {number} says", int(count)
    return spaces, f"as on line {number}", None


def _binary(data: bytes) -> bool:
    """Whether bytes are no text: not UTF-8, or holding control characters."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return _CONTROL.search(data) is not None


def _looks_like_numbers(fields: list[bytes]) -> bool:
    """Whether fields read as vector components ("0.418", "-1e-05"), which tokens are not."""
    try:
        [float(f) for f in fields]
    except ValueError:
        return False
    return all(b"." in f or b"e" in f.lower() for f in fields)


def _read_spacy(
    table: Path, key2row: Path, wanted: set[bytes], dim: int | None, skip: bool
) -> tuple[int, dict[bytes, np.ndarray], int, int, bool]:
    """Like :func:`_read_glove` for a spaCy table and its key2row TSV (lines = TSV lines)."""
    bad = _BadLines(key2row, skip)
    row_of: dict[bytes, int] = {}
    number, raw = 0, b"\n"
    with _open(table) as f:
        n_rows, width, dtype = _npy_header(f, table)
        if dim is not None and dim != width:
            raise VectorFileError(f"the table has D={width}, not the requested {dim}", table)
        for number, raw in _lines(key2row):
            token, tab, text = raw.rstrip(b"\r\n").partition(b"\t")
            if not tab or b"\t" in text:
                bad("expected 'word<TAB>row'", number, raw)
                continue
            if token not in wanted or token in row_of:
                continue
            if not text.isdigit() or int(text) >= n_rows:
                shown = text.decode(errors="replace")
                bad(f"row {shown!r} is not an index into the table's {n_rows} rows", number, raw)
                continue
            row_of[token] = int(text)
        if number == 0:
            raise VectorFileError("empty file: no keys", key2row)
        rows = np.unique(np.fromiter(row_of.values(), dtype=np.int64, count=len(row_of)))
        kept = _read_rows(f, table, n_rows, width, dtype, rows)  # [len(rows), D]
    finite = np.isfinite(kept).all(axis=1)  # [len(rows)]
    if not finite.all():  # as a GloVe line would be, a wanted row with NaN or inf is refused
        row = int(rows[np.argmin(finite)])
        word = next(t for t, r in row_of.items() if r == row).decode(errors="replace")
        raise VectorFileError(f"row {row} (the vector of {word!r}) {_NOT_FINITE}", table)
    slot = {r: i for i, r in enumerate(rows.tolist())}
    vecs = {tok: kept[slot[r]] for tok, r in row_of.items()}
    return width, vecs, number, bad.count, not raw.endswith(b"\n")


def _npy_header(f: io.BufferedIOBase, path: Path) -> tuple[int, int, np.dtype]:
    try:
        v1 = np.lib.format.read_magic(f) == (1, 0)
        read = np.lib.format.read_array_header_1_0 if v1 else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = read(f)
    except _DECODE_ERRORS as err:
        raise VectorFileError(_CORRUPT.format(err), path) from err
    except NPY_HEADER_ERRORS as err:
        raise VectorFileError(f"not a readable .npy array ({err})", path) from err
    if len(shape) != 2 or fortran_order or dtype.kind != "f":
        raise VectorFileError(f"expected a C-order [R, D] float array, found {dtype} {shape}", path)
    return shape[0], shape[1], dtype


@np.errstate(over="ignore")  # a float64 row too large for float32 becomes inf, refused later
def _read_rows(
    f: io.BufferedIOBase, path: Path, n_rows: int, width: int, dtype: np.dtype, rows: np.ndarray
) -> np.ndarray:
    """The sorted ``rows`` of a [R, D] table, streamed in blocks: [len(rows), D] float32.

    The whole file is read, past the last wanted row, so that a truncated one is noticed.
    """
    kept = np.empty((len(rows), width), dtype=np.float32)
    row_bytes = width * dtype.itemsize
    block = max(1, (16 << 20) // row_bytes)
    start = 0
    try:
        while start < n_rows:
            n = min(block, n_rows - start)
            buf = f.read(n * row_bytes)
            if len(buf) < n * row_bytes:
                done = start + len(buf) // row_bytes
                raise VectorFileError(
                    f"the table ends after {done} of {n_rows} rows; the file looks truncated", path
                )
            lo, hi = np.searchsorted(rows, [start, start + n])
            kept[lo:hi] = np.frombuffer(buf, dtype).reshape(n, width)[rows[lo:hi] - start]
            start += n
        if f.read(1):
            raise VectorFileError(f"unexpected data after the table's {n_rows} rows", path)
    except _DECODE_ERRORS as err:
        raise VectorFileError(_CORRUPT.format(err), path) from err
    return kept


def _assemble(
    keys: Sequence[str | None],
    vecs: dict[bytes, np.ndarray],
    dim: int,
    lower_fallback: bool,
    seed: int,
    oov_scale: float,
) -> tuple[np.ndarray, np.ndarray, CoverageReport]:
    """([V, D] matrix, [V] found mask, counts) from the vectors read for the wanted tokens."""
    rng = np.random.default_rng(seed)
    matrix = rng.uniform(-oov_scale, oov_scale, size=(len(keys), dim)).astype(np.float32)  # [V, D]
    found = np.zeros(len(keys), dtype=bool)  # [V]
    exact = lower = padding = 0
    missing: list[str] = []
    for i, key in enumerate(keys):
        if key is None:
            matrix[i] = 0.0
            padding += 1
            continue
        vec = vecs.get(key.encode())
        if vec is not None:
            exact += 1
        elif lower_fallback and (vec := vecs.get(key.lower().encode())) is not None:
            lower += 1
        else:
            missing.append(key)
            continue
        matrix[i] = vec
        found[i] = True
    distinct, shared, groups = _sharing(keys, matrix, found)
    counts = CoverageReport(
        "",
        len(keys),
        exact,
        lower,
        len(missing),
        padding,
        0,
        0,
        tuple(missing[:_EXAMPLES]),
        distinct=distinct,
        shared=shared,
        shared_examples=groups,
    )
    return matrix, found, counts


def _sharing(
    keys: Sequence[str | None], matrix: np.ndarray, found: np.ndarray
) -> tuple[int, int, tuple[tuple[str, ...], ...]]:
    """(distinct vectors among the found keys, keys sharing one with a different word,
    example groups): words are told apart case-insensitively, keys in vocabulary order."""
    rows = np.flatnonzero(found)  # [F]
    if not len(rows):
        return 0, 0, ()
    _, group = np.unique(matrix[rows], axis=0, return_inverse=True)  # group id per found key
    group_of = group.reshape(-1).tolist()  # [F]
    words: dict[int, dict[str, None]] = {}  # group -> its words (lower-cased), in key order
    for g, row in zip(group_of, rows.tolist(), strict=True):
        words.setdefault(g, {})[str(keys[row]).lower()] = None
    shared = sum(len(words[g]) > 1 for g in group_of)
    examples = [tuple(list(w)[:4]) for w in words.values() if len(w) > 1][:_EXAMPLES]
    return len(words), shared, tuple(examples)


# --- cache ---------------------------------------------------------------------------------


def _cache_key(
    files: Sequence[Path], keys: Sequence[str | None], settings: list[object]
) -> tuple[str, dict[str, Any]]:
    """(the entry's key, its source: the files' paths and a digest of their version, which
    entries of other keys built from the same version share)."""
    stats = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    digest = hashlib.sha256(json.dumps([CACHE_VERSION, stats, settings]).encode())
    version = hashlib.sha256(json.dumps([CACHE_VERSION, [s[1:] for s in stats]]).encode())
    for p in files:
        ends = fingerprint(p)
        digest.update(ends)
        version.update(ends)
    digest.update(json.dumps(list(keys)).encode())  # most of a cached load's time
    source = {"files": [s[0] for s in stats], "version": version.hexdigest()[:24]}
    return digest.hexdigest()[:24], source


def fingerprint(path: Path) -> bytes:
    """A hash of the first and last MiB of a regular file (b"" for a pipe, which reading
    would drain): a same-size file put in place with its mtime kept (``cp -p``, ``rsync -t``,
    a tar extract) has other bytes there, and a compressed file's last bytes hold a checksum
    of all of it. Metadata that says nothing of the content (ctime: chmod, a hard link, a
    backup resetting atime) would rebuild minutes of cache for nothing."""
    if not path.is_file():
        return b""
    with path.open("rb") as f:
        head = f.read(_FINGERPRINT)
        f.seek(max(f.seek(0, os.SEEK_END) - _FINGERPRINT, len(head)))
        return hashlib.sha256(head + f.read()).digest()


def _cache_folder(path: Path, cache_dir: str | Path | None) -> Path | None:
    """Where the cache of ``path`` goes; None (no cache) where nowhere is known."""
    if cache_dir is not None:
        return Path(cache_dir)
    beside = path.absolute().parent / ".treeqa-cache"
    # Mode bits as well as access(): root may write anywhere, but a folder marked
    # read-only (a shared data folder) should stay untouched. One made by another user
    # may be read-only to us in a folder we can write to.
    folder = beside if beside.is_dir() else beside.parent
    if os.access(folder, os.W_OK) and folder.stat().st_mode & 0o222:
        return beside
    try:
        home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # HOME unset, and a user the system's user list lacks (a container's)
        warnings.warn(
            f"no vectors cache: {folder} is read-only and no home folder is known (HOME is "
            "unset); set XDG_CACHE_HOME or HOME to a folder you can write to",
            stacklevel=3,
        )
        return None
    return home / "treeqa" / "vectors"


def _read_cache(stem: Path, n_keys: int) -> Vectors | None:
    """The cached result, or None when it is absent, incomplete or corrupt. An entry whose
    arrays or report do not match the CRC-32s its JSON recorded (damaged on disk or in a
    copy) is also None, with a warning naming the file: it would read as other vectors. So is
    one whose JSON records none (written before they were, or its JSON damaged): built again,
    once, it has them."""
    try:
        meta = json.loads(stem.with_name(stem.name + ".json").read_text(encoding="utf-8"))
        meta.pop("built_from", None)  # for pruning
        crc32 = meta.pop("crc32")
        matrix = np.load(stem.with_name(stem.name + ".matrix.npy"), allow_pickle=False)
        found = np.load(stem.with_name(stem.name + ".found.npy"), allow_pickle=False)
        meta["missing_examples"] = tuple(meta["missing_examples"])
        meta["shared_examples"] = tuple(tuple(g) for g in meta["shared_examples"])
        report = CoverageReport(**meta)
    except (OSError, EOFError, KeyError, *NPY_HEADER_ERRORS):
        return None
    ok = matrix.dtype == np.float32 and matrix.ndim == 2 and found.dtype == np.bool_
    ok &= matrix.flags.c_contiguous  # as written; a header flipped to Fortran order is not
    if not ok or matrix.shape[0] != n_keys or found.shape != (n_keys,) or report.rows != n_keys:
        return None
    for name, got in _checksums(Vectors(matrix, found, report)).items():
        if not isinstance(crc32, dict) or crc32.get(name) != got:
            file = f"{stem}.{name}.npy" if name != "report" else f"{stem}.json"
            warnings.warn(
                f"{file}: damaged vectors cache: its {name} does not match the CRC-32 "
                f"recorded in {stem.name}.json when it was written; reading the vectors "
                "file again",
                stacklevel=3,
            )
            return None
    try:  # the JSON's mtime says when the entry was last used (``_prune``)
        os.utime(stem.with_name(stem.name + ".json"))
    except OSError:  # a folder of someone else's, read-only to us
        pass
    return Vectors(matrix, found, report)


def _write_cache(stem: Path, vectors: Vectors, source: dict[str, Any]) -> None:
    """Write the arrays, then the JSON last: a reader that finds the JSON finds the arrays.
    Then delete what the folder holds for nothing (``_prune``)."""
    crc32 = _checksums(vectors)
    meta = json.dumps(asdict(vectors.report) | {"built_from": source, "crc32": crc32}).encode()
    parts: list[tuple[str, Callable[[IO[bytes]], object]]] = [
        (".matrix.npy", lambda f: np.save(f, vectors.matrix)),
        (".found.npy", lambda f: np.save(f, vectors.found)),
        (".json", lambda f: f.write(meta)),
    ]
    try:
        stem.parent.mkdir(parents=True, exist_ok=True)
        for suffix, write in parts:
            # A temp file renamed into place: readers never see a half-written file.
            fd, tmp = tempfile.mkstemp(dir=stem.parent, prefix=stem.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    write(f)
                os.replace(tmp, stem.with_name(stem.name + suffix))
            finally:
                Path(tmp).unlink(missing_ok=True)
    except OSError as err:
        warnings.warn(f"could not write the vectors cache in {stem.parent}: {err}", stacklevel=3)
        return
    _prune(stem.parent, source)


def _checksums(vectors: Vectors) -> dict[str, int]:
    """CRC-32 of each array's bytes and of the report: byte flips in a cached table would
    otherwise read as other vectors. Checked at every cached load, so the cheapest check that
    catches them (``benchmarks/results/vectors-cache.md``: 1 ms for a [21701, 50] matrix, 6
    for a [21701, 300] one)."""
    return {
        "matrix": zlib.crc32(vectors.matrix.data),
        "found": zlib.crc32(vectors.found.data),
        "report": zlib.crc32(json.dumps(asdict(vectors.report)).encode()),
    }


def _prune(folder: Path, source: dict[str, Any]) -> None:
    """Delete the entries in ``folder`` built from another version of ``source``'s files
    (each new version of a file would add a table for ever; a folder may hold the tables of
    several files, and of several keys of one), and the temporaries that writers killed
    part-way left. A temporary's writer may be another process, on another machine sharing
    the folder, writing now: only one untouched for ``_STALE`` seconds is deleted (a writer
    writes its files in seconds). An entry written before entries recorded their source (no
    ``built_from``) cannot be told to be another version's: it is deleted once unused for
    ``_UNUSED`` seconds (a cache hit renews its JSON's mtime), which costs at worst a rebuild.
    Best effort: a file that cannot be deleted is left."""
    try:
        names = [p.name for p in folder.iterdir()]
    except OSError:
        return
    stale = time.time() - _STALE
    for name in names:
        path = folder / name
        try:
            if _PARTIAL.fullmatch(name):
                if path.stat().st_mtime < stale:
                    path.unlink(missing_ok=True)
                continue
            if not _ENTRY.fullmatch(name):
                continue
            meta = json.loads(path.read_text(encoding="utf-8"))
            built = meta.get("built_from")
            # Written before entries recorded their source: its report and arrays, no source.
            legacy = "built_from" not in meta and "rows" in meta
            legacy &= path.with_name(name.removesuffix(".json") + ".matrix.npy").is_file()
            if legacy and path.stat().st_mtime < time.time() - _UNUSED:
                _delete_entry(folder, name.removesuffix(".json"))
        except (OSError, ValueError, AttributeError):  # gone meanwhile, or not an entry's JSON
            continue
        if not isinstance(built, dict) or built.get("files") != source["files"]:
            continue  # another file's, or an entry that names no source
        if built.get("version") != source["version"]:
            _delete_entry(folder, name.removesuffix(".json"))


def _delete_entry(folder: Path, stem: str) -> None:
    # The JSON first: a reader that finds it finds the arrays, or none.
    for suffix in (".json", ".matrix.npy", ".found.npy"):
        try:
            (folder / (stem + suffix)).unlink(missing_ok=True)
        except OSError:
            break
