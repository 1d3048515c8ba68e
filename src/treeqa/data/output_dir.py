"""Output folders of the data commands: built aside and renamed into place, and replaced
(``--overwrite``) only when an earlier run of the same command made them."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def check_replaceable(
    out: Path, overwrite: bool, made_here: Callable[[dict[str, Any]], bool], maker: str
) -> None:
    """A FileExistsError unless ``out`` is missing or empty, or ``overwrite`` is given and its
    ``meta.json`` says (``made_here``) that ``maker`` wrote it: no other folder is deleted."""
    if not out.exists() or not any(out.iterdir()):
        return
    if not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (--overwrite replaces it)")
    try:
        meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = None
    if not isinstance(meta, dict) or not made_here(meta):
        raise FileExistsError(
            f"{out} was not written by `{maker}` (no meta.json of its own), so --overwrite "
            "does not delete it; give another --out"
        )


@contextmanager
def built_aside(out: Path) -> Iterator[Path]:
    """A new folder beside ``out`` to write into, renamed to ``out`` (replacing it) when the
    block ends and deleted when it fails: a failed run leaves an earlier ``out`` as it was.
    Its name is its own, so a folder the user named ``out.partial`` is never touched."""
    work = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    work.mkdir(parents=True)
    try:
        yield work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    work.rename(out)
