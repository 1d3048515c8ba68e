"""Output folders of the data commands: a link to a folder and "." as --out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treeqa.data.output_dir import built_aside, check_replaceable

WRITTEN = ["meta.json", "a.txt"]


def _write(out: Path) -> None:
    check_replaceable(out, True, lambda meta: meta.get("by") == "me", "me", written=WRITTEN)
    with built_aside(out) as work:
        (work / "meta.json").write_text(json.dumps({"by": "me"}))
        (work / "a.txt").write_text("new")


def test_a_link_to_a_folder_is_written_through(tmp_path: Path) -> None:
    # All the work done, then "Cannot call rmtree on a symbolic link" and the result left in
    # a hidden .partial folder: the folder the link names is replaced instead, the link kept.
    (tmp_path / "target").mkdir()
    link = tmp_path / "link"
    link.symlink_to("target")
    _write(link)
    _write(link)  # and again, as --overwrite over its own output
    assert link.is_symlink() and (tmp_path / "target" / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target"]


def test_dot_is_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    _write(Path("."))  # was "PosixPath('.') has an empty name"
    assert (tmp_path / "here" / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]
