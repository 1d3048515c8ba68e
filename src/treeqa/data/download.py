"""Fetch the official SST, SQuAD and GloVe files: resumable, verified, atomic.

Layout under ``dest_dir``: ``sst/{train,dev,test}.txt``, ``squad/{train,dev}-v1.1.json`` (and
``-v2.0``), ``glove/glove.840B.300d.txt``. Archives are kept beside what they unpack to, so a
second call can verify them cheaply and make no request at all.

A transfer writes ``<name>.part`` and resumes it with an HTTP Range request; the final name only
appears (``os.replace``) once size and checksum agree, so an existing final file that verifies is
trusted. One that does not (the user's own edit, an older release) is never deleted: it stays in
place until a verified download is ready, then moves to ``<name>.old`` with a DownloadWarning.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import urllib.error
import urllib.request
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from tqdm import tqdm

from treeqa.data.output_dir import file_in_the_way

ENV_BASE = "TREEQA_DOWNLOAD_BASE"
URL_SCHEMES = ("http", "https", "ftp", "file")
"""What a mirror's URL may start with (what urllib fetches)."""
_CHUNK = 1 << 20
_USER_AGENT = "treeqa-download/0.1 (+urllib)"


@dataclass(frozen=True, slots=True)
class Resource:
    """One remote file. ``name`` is the folder under ``dest_dir`` it lands in; ``size`` is in
    bytes; ``unpack`` is ``"zip"`` (extract every member, flattened, into that folder) or None."""

    name: str
    url: str
    filename: str
    sha256: str | None = None
    md5: str | None = None
    size: int | None = None
    unpack: str | None = None


_SQUAD = "https://rajpurkar.github.io/SQuAD-explorer/dataset/"

# Only values that several independent published copies agree on (torchtext, ParlAI, Flux.jl,
# wget logs); the rest are None. No GloVe checksum is published, so its size is what is checked.
CATALOGUE: dict[str, list[Resource]] = {
    "sst": [
        Resource(
            "sst",
            "http://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip",
            "trainDevTestTrees_PTB.zip",
            sha256="5c613a4f673fc74097d523a2c83f38e0cc462984d847b82c7aaf36b01cbbbfcc",
            unpack="zip",
        )
    ],
    "squad": [
        Resource(
            "squad",
            _SQUAD + "train-v1.1.json",
            "train-v1.1.json",
            md5="981b29407e0affa3b1b156f72073b945",
            size=30_288_272,
        ),
        Resource(
            "squad",
            _SQUAD + "dev-v1.1.json",
            "dev-v1.1.json",
            md5="3e85deb501d4e538b6bc56f786231552",
            size=4_854_279,
        ),
    ],
    "squad2": [
        Resource(
            "squad",
            _SQUAD + "train-v2.0.json",
            "train-v2.0.json",
            sha256="68dcfbb971bd3e96d5b46c7177b16c1a4e7d4bdef19fb204502738552dede002",
            size=42_123_633,
        ),
        Resource(
            "squad",
            _SQUAD + "dev-v2.0.json",
            "dev-v2.0.json",
            sha256="80a5225e94905956a6446d296ca1093975c4d3b3260f1d6c8f68bc2ab77182d8",
            size=4_370_528,
        ),
    ],
    "glove": [
        Resource(
            "glove",
            "https://nlp.stanford.edu/data/glove.840B.300d.zip",
            "glove.840B.300d.zip",
            size=2_176_768_927,
            unpack="zip",
        )
    ],
    "glove6b": [
        Resource(
            "glove",
            "https://nlp.stanford.edu/data/glove.6B.zip",
            "glove.6B.zip",
            size=862_182_613,
            unpack="zip",
        )
    ],
}


class DownloadError(RuntimeError):
    """A transfer failed or produced the wrong bytes, or the destination cannot be written; the
    message names the URL or the path, and what was kept for the next call."""


class DownloadInterrupted(KeyboardInterrupt):
    """Ctrl-C during a download. Still a KeyboardInterrupt, so callers that stop on one still
    do; the message says what was kept for the next call to resume from."""


class DownloadWarning(UserWarning):
    """A file that failed verification was moved aside (never deleted) for a verified one."""


def download(
    name: str,
    dest_dir: str | Path,
    *,
    base_url: str | None = None,
    progress: bool = True,
    timeout: float = 30.0,
) -> list[Path]:
    """Fetch, verify and unpack the catalogue entry ``name``; return the usable files.

    ``base_url`` (or ``$TREEQA_DOWNLOAD_BASE``) replaces everything before each URL's file name,
    for a mirror or a local test server. ``timeout`` is per socket operation, in seconds.
    """
    if name not in CATALOGUE:
        raise ValueError(f"unknown download {name!r}; choose one of {', '.join(CATALOGUE)}")
    base = base_url if base_url is not None else os.environ.get(ENV_BASE) or None
    if base is not None and urlsplit(base).scheme not in URL_SCHEMES:
        given = "the mirror" if base_url is not None else f"${ENV_BASE}"
        raise ValueError(
            f"{given} {base!r} is not a URL this command reads ({', '.join(URL_SCHEMES)}): "
            "give http://HOST/PATH, or file:///FOLDER for a folder on this machine"
        )
    paths: list[Path] = []
    for res in CATALOGUE[name]:
        folder = Path(dest_dir) / res.name
        url = res.url if base is None else base.rstrip("/") + "/" + _url_name(res.url)
        new = [folder, *folder.parents]
        new = new[: next((i for i, f in enumerate(new) if f.exists()), len(new))]
        _make_folder(folder)
        with _only_writer(folder), _removed_if_empty(new):
            archive = fetch(
                url,
                folder / res.filename,
                sha256=res.sha256,
                md5=res.md5,
                size=res.size,
                progress=progress,
                timeout=timeout,
            )
            if res.unpack is None:
                paths.append(archive)
            elif res.unpack == "zip":
                paths.extend(_unzip(archive, folder, progress=progress))
            else:
                raise ValueError(f"{res.filename}: unknown unpack kind {res.unpack!r}")
    return paths


@contextlib.contextmanager
def _removed_if_empty(made: list[Path]) -> Iterator[None]:
    """Folders ``made`` (innermost first) for a download are removed again when it fails with
    nothing in them (a mistyped mirror answering 404): only empty ones, never a file."""
    try:
        yield
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()
            except OSError:  # holds a .part kept to resume, or something else
                break
        raise


@contextlib.contextmanager
def _only_writer(folder: Path) -> Iterator[None]:
    """Hold ``folder`` for this download alone (an advisory lock on the folder, released when
    the process ends however it ends). A second download into the same folder would append to
    the same ``.part`` and delete it as damaged, or unpack over a member being written: it is
    refused before it touches anything."""
    try:
        import fcntl
    except ImportError:  # (Windows: no flock; downloads are not guarded there)
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a folder that cannot be opened for reading is not guarded
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DownloadError(
                f"another download is writing into {folder}: let it finish (or stop it, and "
                "what it fetched is kept to resume), then run again"
            ) from None
        except OSError:  # a file system without locks
            pass
        yield
    finally:
        os.close(fd)


def fetch(
    url: str,
    target: str | Path,
    *,
    sha256: str | None = None,
    md5: str | None = None,
    size: int | None = None,
    progress: bool = True,
    timeout: float = 30.0,
) -> Path:
    """Download ``url`` to ``target`` unless a verified copy is there; return ``target``.

    A broken transfer raises DownloadError (Ctrl-C: DownloadInterrupted) and keeps
    ``<target>.part`` for the next call to resume; wrong bytes (size or checksum) are deleted
    before DownloadError is raised. Without ``size`` the server's Content-Length is checked
    instead. An existing ``target`` that fails verification is left alone unless a verified
    download replaces it; then it is moved to ``<target>.old`` with a DownloadWarning.
    """
    target = Path(target)
    for path in (target, target.with_name(target.name + ".part")):
        if path.is_dir():  # found before the transfer, not after it
            raise DownloadError(f"{path} is a folder; the download is written there: move it away")
    stale = None
    if target.is_file():
        stale = _mismatch(target, sha256=sha256, md5=md5, size=size)
        if stale is None:
            return target
    _make_folder(target.parent)
    part = target.with_name(target.name + ".part")
    try:
        expected = _transfer(url, part, size=size, progress=progress, timeout=timeout)
        problem = _mismatch(part, sha256=sha256, md5=md5, size=expected, name=target.name)
    except KeyboardInterrupt as exc:
        raise DownloadInterrupted(f"interrupted; {_leftover(part)}") from exc
    if problem is not None:
        part.unlink()
        raise DownloadError(f"{url}: {problem}; the bad download was deleted")
    if stale is not None:
        _set_aside(target, stale)
    os.replace(part, target)
    return target


def _make_folder(folder: Path) -> None:
    above = folder if folder.exists() and not folder.is_dir() else file_in_the_way(folder)
    if above:
        raise DownloadError(f"cannot create the folder {folder}: {above} is a file")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DownloadError(f"cannot create the folder {folder}: {exc.strerror or exc}") from exc


def _set_aside(path: Path, why: str) -> Path:
    """Move ``path`` to the first free ``<name>.old``, ``.old2``, ... and warn.

    A final name only ever appears verified, so a file there that fails verification is most
    likely the user's own edit or an older release they may still want: keeping it costs disk,
    losing it costs their work. Refusing instead would leave a damaged file blocking every run.
    """
    backup, n = path.with_name(path.name + ".old"), 1
    while backup.exists():
        n += 1
        backup = path.with_name(f"{path.name}.old{n}")
    os.replace(path, backup)
    warnings.warn(
        f"{path} did not verify ({why}); moved it to {backup} and put the verified file in its place",
        DownloadWarning,
        stacklevel=3,
    )
    return backup


def _transfer(
    url: str, part: Path, *, size: int | None, progress: bool, timeout: float
) -> int | None:
    """Append the rest of ``url`` to ``part``; return the full size the file should have."""
    offset = part.stat().st_size if part.is_file() else 0
    if size is not None and offset >= size:
        if offset == size:
            return size  # interrupted after the last byte: only verification is left
        part.unlink()
        offset = 0
    headers = {"User-Agent": _USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout
        )
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:
            # "bytes */N": the whole file is N bytes. A part of N was stopped after its last
            # byte, before verification (no size was known to see that without asking).
            whole = re.fullmatch(r"\s*bytes\s+\*/(\d+)\s*", exc.headers.get("Content-Range", ""))
            if whole is not None and int(whole[1]) == offset:
                return offset
            # The part is not a prefix of what the server has now; start over.
            part.unlink()
            return _transfer(url, part, size=size, progress=progress, timeout=timeout)
        raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        # Its reason reads "[Errno 111] Connection refused"; str(exc) wraps it in "<urlopen error".
        raise DownloadError(_broken(url, part, exc.reason)) from exc
    except (OSError, http.client.HTTPException) as exc:
        raise DownloadError(_broken(url, part, exc)) from exc

    with response:
        if response.status == 206:
            start, total = _content_range(response.headers.get("Content-Range", ""))
            if start != offset:
                response.close()
                part.unlink()
                return _transfer(url, part, size=size, progress=progress, timeout=timeout)
            mode = "ab"
        else:
            # A plain 200 means the server ignored Range: the body is the whole file.
            offset, mode = 0, "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length else None
        if size is not None and total is not None and total != size:
            raise DownloadError(f"{url}: server offers {total} bytes, expected {size}")
        expected = size if size is not None else total
        bar = _bar(expected, part.name.removesuffix(".part"), offset, enabled=progress)
        done = offset + _append(url, response, part, mode, bar)
    # http.client returns a short body without error when the peer closes early.
    if expected is not None and done < expected:
        reason = f"connection closed after {done} of {expected} bytes"
        raise DownloadError(_broken(url, part, reason))
    return expected


def _append(url: str, response: http.client.HTTPResponse, part: Path, mode: str, bar: tqdm) -> int:
    """Write the body to ``part`` as it arrives; return how many bytes were written."""
    with bar:
        try:
            out = open(part, mode)
        except OSError as exc:
            raise DownloadError(f"cannot write {part}: {exc.strerror or exc}") from exc
        done = 0
        try:
            with out:
                # read1 hands over whatever the socket has. read(n) would wait for n bytes and
                # drop those it held when a stall timed out or Ctrl-C came.
                while chunk := response.read1(_CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    bar.update(len(chunk))
        except (OSError, http.client.HTTPException) as exc:
            raise DownloadError(_broken(url, part, exc)) from exc
    return done


def _unzip(archive: Path, folder: Path, *, progress: bool) -> list[Path]:
    """Extract every file member into ``folder`` by base name (which also rules out paths
    escaping ``folder``); members already there with the right size are left alone, and a file
    of another size is moved to ``<name>.old`` (see :func:`_set_aside`), never overwritten."""
    try:
        with zipfile.ZipFile(archive) as zf:
            members = [m for m in zf.infolist() if not m.is_dir()]
            outs = [folder / PurePosixPath(m.filename).name for m in members]
            if len(set(outs)) != len(outs):
                raise DownloadError(f"{archive}: members share a file name; cannot flatten")
            todo = [
                (m, out)
                for m, out in zip(members, outs, strict=True)
                if not (out.is_file() and out.stat().st_size == m.file_size)
            ]
            for _, out in todo:
                if out.is_dir() or out.with_name(out.name + ".part").is_dir():
                    raise DownloadError(
                        f"{out} is a folder; a file of {archive.name} unpacks there"
                    )
            total = sum(m.file_size for m, _ in todo)
            with _bar(total, f"unzip {archive.name}", 0, enabled=progress and bool(todo)) as bar:
                for member, out in todo:
                    _extract(zf, member, out, bar, archive.name)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        # A damaged member's compressed data fails in zlib (or ends early), not in zipfile: an
        # archive checked by size only (GloVe) gets this far with any byte wrong.
        raise DownloadError(f"{archive}: not a valid zip ({exc}); delete it and retry") from exc
    except KeyboardInterrupt as exc:
        raise DownloadInterrupted(f"interrupted while unpacking {archive}; run again") from exc
    return outs


def _extract(
    zf: zipfile.ZipFile, member: zipfile.ZipInfo, out: Path, bar: tqdm, zip_name: str
) -> None:
    tmp = out.with_name(out.name + ".part")
    try:
        with zf.open(member) as src, open(tmp, "wb") as dst:
            while chunk := src.read(_CHUNK):
                dst.write(chunk)
                bar.update(len(chunk))
    except BaseException as exc:  # a half-written member is ours: it is not left behind
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise DownloadError(f"cannot write {tmp}: {exc.strerror or exc}") from exc
        raise
    if out.is_file():
        got = out.stat().st_size
        _set_aside(out, f"{got} bytes, but {member.filename} in {zip_name} has {member.file_size}")
    os.replace(tmp, out)


def _bar(total: int | None, desc: str, initial: int, *, enabled: bool) -> tqdm:
    """A progress bar on a terminal only: on a log file or a pipe (a CI job, ``2> log``) its
    carriage-return redraws would pile up, hundreds a minute, in one unreadable line."""
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=None if enabled else True,  # None: off where stderr is not a terminal
    )


def _mismatch(
    path: Path, *, sha256: str | None, md5: str | None, size: int | None, name: str = ""
) -> str | None:
    """Why ``path`` (the file ``name``, by default its own) is not the expected file, or None
    when it is."""
    actual, name = path.stat().st_size, name or path.name
    if size is not None and actual != size:
        return f"size mismatch for {name}: expected {size} bytes, got {actual}"
    for algorithm, want in (("sha256", sha256), ("md5", md5)):
        if want is not None:
            got = _digest(path, algorithm)
            if got != want.lower():
                return f"{algorithm} mismatch for {name}: expected {want}, got {got}"
    return None


def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _content_range(value: str) -> tuple[int | None, int | None]:
    """(first byte, full size) from ``bytes A-B/N``; None where absent or ``*``."""
    m = re.fullmatch(r"\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*", value)
    if m is None:
        return None, None
    return int(m[1]), None if m[2] == "*" else int(m[2])


def _broken(url: str, part: Path, reason: object) -> str:
    return f"{url}: {reason}; {_leftover(part)}"


def _leftover(part: Path) -> str:
    """What a rerun starts from, said truthfully; an empty ``part`` is removed, not reported."""
    have = part.stat().st_size if part.is_file() else 0
    if have:
        return f"kept {have:,} bytes in {part}, run again to resume"
    part.unlink(missing_ok=True)
    return "nothing was downloaded"


def _url_name(url: str) -> str:
    return PurePosixPath(urlsplit(url).path).name
