"""Output folders of the data commands: a link to a folder and "." as --out."""

from __future__ import annotations

import json
import shutil
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


def test_the_folder_you_are_in_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # It would be replaced by a folder built beside it, leaving the shell in a deleted one
    # (it was "PosixPath('.') has an empty name").
    (tmp_path / "here" / "below").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "here" / "below")
    for out in (Path("."), Path(".."), tmp_path / "here"):
        with pytest.raises(FileExistsError, match="is the folder you are in"):
            _write(out)
    _write(Path("../../there"))  # elsewhere, named from here: fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here", "there"]


def test_a_loop_of_links_and_the_folders_mode(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(FileExistsError, match="cannot follow its links"):
        _write(tmp_path / "a")
    (tmp_path / "out").mkdir(mode=0o750)
    _write(tmp_path / "out")
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o750  # kept when replaced


def test_a_run_killed_while_deleting_the_old_folder_leaves_the_new_one_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The old folder was deleted where it stood, then the new one renamed in: a kill (Ctrl-C,
    # here after one file) left --out with the old meta.json and half its files.
    out = tmp_path / "out"
    _write(out)

    def killed(folder: Path, **_: object) -> None:
        (Path(folder) / "a.txt").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        _write(out)
    monkeypatch.undo()
    assert (out / "a.txt").read_text() == "new" and (out / "meta.json").is_file()
    # What is left of the old one waits in a work folder, which the next run deletes.
    assert any(tmp_path.glob(".out.*.partial"))
