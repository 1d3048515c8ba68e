"""Output folders of the data commands: built aside and renamed into place, and replaced
(``--overwrite``) only when an earlier run of the same command made them and they hold nothing
else."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def file_in_the_way(path: Path) -> Path | None:
    """The first of ``path``'s folders, from the root down, that is a file: nothing can be
    read or written under it (the system's word for it is "Not a directory")."""
    for above in reversed(path.parents):
        if above.exists() and not above.is_dir():
            return above
    return None


def real_folder(out: Path) -> Path:
    """``out`` as the folder it names (links followed, "." given a name). The folder you are
    in is refused: it is replaced by one built beside it, which would leave your shell in a
    deleted folder."""
    try:
        real = out.resolve()
    except (RuntimeError, OSError) as err:  # a loop of links (RuntimeError before 3.13)
        raise FileExistsError(f"{out}: cannot follow its links ({err})") from None
    here = Path.cwd().resolve()
    if here == real or real in here.parents:
        raise FileExistsError(
            f"--out {out} is the folder you are in (or holds it), which the output replaces: "
            "give it from outside, e.g. cd .. first"
        )
    return real


def check_replaceable(
    out: Path,
    overwrite: bool,
    made_here: Callable[[dict[str, Any]], bool],
    maker: str,
    *,
    written: Collection[str],
    inputs: Iterable[Path] = (),
) -> None:
    """A FileExistsError unless ``out`` is missing or empty, or ``overwrite`` is given, its
    ``meta.json`` says (``made_here``) that ``maker`` wrote it, and it holds only the entries
    ``maker`` writes (``written``); and unless none of ``inputs`` (a cache folder included,
    which may not exist yet) lies inside it: replacing ``out`` deletes nothing the user put
    there."""
    out = real_folder(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} is a file; --out names the folder to write into")
    empty = not out.exists() or not any(out.iterdir())
    if not empty and not overwrite:
        raise FileExistsError(
            f"{out} exists and is not empty (--overwrite, or overwrite=True from Python, "
            "replaces it)"
        )
    # Even in a missing or empty out: a cache folder written there would be replaced.
    inside = [p for p in inputs if p.resolve().is_relative_to(out.resolve())]
    if inside:
        raise FileExistsError(
            f"{inside[0]} is an input of this command and lies inside {out}, which the output "
            "replaces: move it out, or give another --out"
        )
    if empty:
        return
    try:
        meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = None
    if not isinstance(meta, dict) or not made_here(meta):
        raise FileExistsError(
            f"{out} was not written by `{maker}` (no meta.json of its own), so --overwrite "
            "does not delete it; give another --out"
        )
    others = sorted(p.name for p in out.iterdir() if p.name not in written)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise FileExistsError(
            f"{out} also holds what `{maker}` did not write ({shown}), which --overwrite would "
            "delete: move it out, or give another --out"
        )


WORK_NAME = re.compile(r"(\d+)(?:-(\d+))?\.[0-9a-f]{8}\.partial")
"""What follows ``.<out>.`` in a work folder's name: its writer's process id, then (where the
system says, as on Linux) a dash and the process's start time, then a random token. A name
without the start time (written by an older version) is judged by its process id alone."""


def _stat(pid: int) -> tuple[str, str] | None:
    """Process ``pid``'s state (``Z``: ended, not yet reaped by its parent) and when it started,
    in clock ticks since boot (fields 3 and 22 of /proc/PID/stat); None where the system does
    not say (not Linux, no such process, another user's hidden)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # Fields 3 on follow the ")" that ends field 2, the command name (which may hold spaces).
    fields = stat.rpartition(b")")[2].split()
    return (fields[0].decode(), fields[19].decode()) if len(fields) > 19 else None


def _writer() -> str:
    """This process as a work folder's name records it (see ``WORK_NAME``)."""
    stat = _stat(os.getpid())
    return f"{os.getpid()}-{stat[1]}" if stat is not None else str(os.getpid())


def _alive(pid: int, started: str | None) -> bool:
    """Whether the writer ``pid`` (started at ``started``, where that was recorded) still
    runs: a process given its id after it ended is another one, told apart by its start time,
    and one killed but not yet reaped by its parent runs no more. Where the system does not
    say, the process id alone decides."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    stat = _stat(pid)
    if stat is None:
        return True
    state, now = stat
    return state != "Z" and (started is None or now == started)


def _writers(out: Path) -> Iterator[tuple[Path, int, bool]]:
    """The work folders that ``built_aside`` made beside ``out``, each with its writer's
    process id and whether that writer still runs."""
    for work in out.parent.glob(f".{out.name}.*.partial"):
        name = WORK_NAME.fullmatch(work.name[len(out.name) + 2 :])
        if work.is_dir() and name is not None:
            pid = int(name[1])
            yield work, pid, _alive(pid, name[2])


def remove_stale_work(out: Path) -> None:
    """Delete the folders that ``built_aside`` left beside ``out`` in a process that was killed
    (one that no longer runs); those of a run still going are left alone."""
    for work, _, alive in _writers(out):
        if not alive:
            shutil.rmtree(work, ignore_errors=True)


def other_writer(out: Path) -> int | None:
    """The process id of another run building ``out`` now (its work folder is beside it)."""
    for _, pid, alive in _writers(out):
        if alive and pid != os.getpid():
            return pid
    return None


@contextmanager
def built_aside(out: Path) -> Iterator[Path]:
    """A new folder beside ``out`` to write into, renamed to ``out`` (replacing it) when the
    block ends and deleted when it fails: a failed run leaves an earlier ``out`` as it was.
    Its name is its own, so a folder the user named ``out.partial`` is never touched; one a
    killed run left is deleted here. A link to a folder is followed: the folder is replaced
    (keeping its permissions). An ``out`` put in place or written into while the block ran
    (another run into it finishing first) is left as it is: the new folder is deleted and a
    FileExistsError says so, as it does before any work while another run builds ``out``."""
    out = real_folder(out)
    if out.parent.is_dir():
        remove_stale_work(out)
        if (pid := other_writer(out)) is not None:
            raise FileExistsError(
                f"{out} is being written by process {pid} (another run into the same --out): "
                "wait for it to end, or give another --out"
            )
    before = _identity(out)
    work = _aside(out)
    try:
        work.mkdir(parents=True)
    except PermissionError:
        raise PermissionError(
            f"cannot write in {out.parent}, where {out.name} is built before it replaces the "
            "old one: give an --out in a folder you can write to"
        ) from None
    if out.is_dir():
        shutil.copymode(out, work)
    try:
        yield work
    except OSError as err:
        shutil.rmtree(work, ignore_errors=True)
        if err.filename is not None and not Path(err.filename).is_relative_to(work):
            raise  # an input's: the system named it
        # A full disk: the system names no file, or one of the hidden folder's.
        kept = f"the {out.name} already there is kept as it was" if before else "none was written"
        failed = OSError(f"{out}: could not be written ({err.strerror or err}); {kept}")
        failed.errno = err.errno
        raise failed from err
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    # Checked when the run began, minutes ago: what was written there since is not ours.
    if _identity(out) != before:
        raise _lost_race(out, work)
    old = None
    if before is not None:
        # Moved aside first, deleted last: a run killed while deleting it leaves the new
        # folder whole, not an old one half deleted (the next run deletes what is left).
        old = _aside(out)
        try:
            out.rename(old)
        except FileNotFoundError:  # another run moved it aside an instant before
            raise _lost_race(out, work) from None
    try:
        work.rename(out)
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        # Another run renamed its folder in an instant before: that one stays.
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        raise _lost_race(out, work) from None
    if old is not None:
        shutil.rmtree(old)


def _identity(out: Path) -> tuple[int, int, int] | None:
    """What tells the folder ``out`` apart from one put in its place or written into since."""
    try:
        st = out.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _lost_race(out: Path, work: Path) -> FileExistsError:
    """Deletes ``work`` and says why: ``out`` was written while this run built its own."""
    shutil.rmtree(work, ignore_errors=True)
    return FileExistsError(
        f"{out} changed while this run was writing its output (another preparation into "
        "it finished first?): it is left as it is now, and this run's output is discarded; "
        "run again with --overwrite to replace it, or give another --out"
    )


def _aside(out: Path) -> Path:
    """A hidden folder name beside ``out`` that ``remove_stale_work`` knows as this process's."""
    return out.with_name(f".{out.name}.{_writer()}.{secrets.token_hex(4)}.partial")
