"""What a run was made with, kept in its checkpoints' metadata (``made_with``): the versions
of treeqa and of the libraries it computes with, and the identity of each data file it read.
With the run's config.toml (seed included) that is what repeating the run needs; a resumed run
says which of its data files changed since it started.

A file up to ``WHOLE`` bytes is identified by the SHA-256 of all of it (SST's splits: ~10 ms);
a larger one (a vectors file of gigabytes, minutes to hash) by its size and the SHA-256 of its
first and last MiB, as the vectors cache keys it (a compressed file's last bytes hold a
checksum of the whole).
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from treeqa import __version__
from treeqa.data.squad_prepare import file_info
from treeqa.data.vectors import fingerprint
from treeqa.train import checkpoint as ckpt

__all__ = ["changed_files", "data_changed", "made_with"]

WHOLE = 64 << 20


def made_with(files: Sequence[Path]) -> dict[str, Any]:
    """{"versions": {python, treeqa, torch, numpy[, spacy]}, "files": [{name, path, bytes,
    sha256 or sha256_ends}, ...]} for the data ``files`` a run reads."""
    versions = {
        "python": platform.python_version(),
        "treeqa": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    try:  # tokenises SQuAD and parses text: its rules change between releases
        versions["spacy"] = importlib.metadata.version("spacy")
    except importlib.metadata.PackageNotFoundError:
        pass
    return {"versions": versions, "files": [identity(Path(p)) for p in files]}


def identity(path: Path) -> dict[str, Any]:
    """``path``'s name, absolute path, size and SHA-256 (of its ends past ``WHOLE`` bytes;
    none of a pipe, which reading would drain)."""
    where = {"name": path.name, "path": str(path.absolute())}
    if not path.is_file():
        return where
    size = path.stat().st_size
    if size <= WHOLE:
        return where | file_info(path)
    return where | {"bytes": size, "sha256_ends": fingerprint(path).hex()}


def changed_files(recorded: Any, now: dict[str, Any]) -> list[str]:
    """The names of the files in ``now`` (``made_with``'s) whose content differs from the
    file of that name ``recorded`` (an earlier ``made_with``, or None from a run of a treeqa
    that kept none): looked up by name, as a resumed run may find its data moved."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("files"), list):
        return []
    before = {f.get("name"): f for f in recorded["files"] if isinstance(f, dict)}
    keys = ("bytes", "sha256", "sha256_ends")
    return [
        f["name"]
        for f in now["files"]
        if f["name"] in before and any(before[f["name"]].get(k) != f.get(k) for k in keys)
    ]


def data_changed(run_dir: Path, now: dict[str, Any]) -> str | None:
    """A one-line warning when the run in ``run_dir``, resumed, reads data files (``now``:
    ``made_with``'s) whose content differs from what its last checkpoint recorded: it goes on
    (a fix to the data may be meant), and its record says so."""
    if not (run_dir / ckpt.LAST).is_file():
        return None
    recorded = ckpt.read_meta(run_dir, prefer=ckpt.LAST).get("made_with")
    changed = changed_files(recorded, now)
    if not changed:
        return None
    return (
        f"warning: {', '.join(changed)} changed since {run_dir} last saved itself; the resumed "
        "run trains and scores on them as they are now"
    )
