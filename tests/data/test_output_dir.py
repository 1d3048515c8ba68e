"""Output folders of the data commands: a link to a folder and "." as --out."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from treeqa.data.output_dir import built_aside, check_replaceable, other_writer, remove_stale_work

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


def _other_run(out: Path) -> None:
    """What another run into ``out`` leaves there when it finishes."""
    with built_aside(out) as work:
        (work / "meta.json").write_text(json.dumps({"by": "me"}))
        (work / "a.txt").write_text("other")


@pytest.mark.parametrize("existed", [False, True])
def test_a_run_that_finishes_second_leaves_the_first_ones_folder_and_says_so(
    tmp_path: Path, existed: bool
) -> None:
    # The state of --out was checked when the run began: a folder another run wrote there
    # since was moved aside and deleted (out missing at the start, or replaced with
    # --overwrite), with no word.
    out = tmp_path / "out"
    if existed:
        _write(out)
    with pytest.raises(FileExistsError, match=rf"{out} changed while this run.*finished first"):
        with built_aside(out) as work:
            (work / "a.txt").write_text("late")
            _other_run(out)
    assert (out / "a.txt").read_text() == "other"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("existed", [False, True])
def test_two_runs_renaming_into_the_same_out_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existed: bool
) -> None:
    # The other run renames its folder in between this run's last look and its rename:
    # that was a bare "[Errno 39] Directory not empty" naming a hidden work folder, which
    # was left behind.
    out = tmp_path / "out"
    if existed:
        _write(out)
    rename = Path.rename

    def other_first(self: Path, target: Path) -> Path:
        if Path(target) == out and self.name.endswith(".partial"):
            monkeypatch.setattr(Path, "rename", rename)
            _other_run(out)
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", other_first)
    with pytest.raises(FileExistsError, match=rf"{out} changed while this run.*finished first"):
        with built_aside(out) as work:
            (work / "a.txt").write_text("late")
    assert (out / "a.txt").read_text() == "other"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_second_run_into_an_out_being_written_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    # Both did all their work (minutes of tokenising) before the second to finish was told
    # that the folder changed meanwhile, with no word of which process wrote it.
    out = tmp_path / "out"
    first = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from treeqa.data.output_dir import built_aside\n"
            f"with built_aside(Path({str(out)!r})) as work:\n"
            "    (work / 'a.txt').write_text('first')\n"
            "    print('writing', flush=True)\n"
            "    sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None and first.stdout.readline() == "writing\n"
        with pytest.raises(
            FileExistsError, match=rf"{out} is being written by process {first.pid} \(another"
        ):
            _write(out)
        assert not out.exists()
    finally:
        first.communicate("", timeout=60)
    assert first.returncode == 0 and (out / "a.txt").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_full_disk_names_the_folder_and_leaves_the_old_one(tmp_path: Path) -> None:
    # Was "[Errno 28] No space left on device", naming no file.
    out = tmp_path / "prepared"
    _write(out)
    for filename in (None, "a.npy"):  # a write names no file; an open, the hidden folder's
        with pytest.raises(OSError) as caught, built_aside(out) as work:
            (work / "meta.json").write_text("half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename and work / filename)
        assert str(caught.value) == (
            f"{out}: could not be written (No space left on device); the prepared already "
            "there is kept as it was"
        )
        assert caught.value.errno == errno.ENOSPC
    assert (out / "a.txt").read_text() == "new" and [p.name for p in tmp_path.iterdir()] == [
        "prepared"
    ]
    with pytest.raises(OSError, match="none was written"), built_aside(tmp_path / "new") as work:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    # An input the system named is its own error.
    with pytest.raises(PermissionError, match="in.json"), built_aside(out):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / "in.json"))


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="no process start times here")
def test_a_work_folder_whose_process_id_now_names_another_process_is_stale(
    tmp_path: Path,
) -> None:
    # The writer was killed and its process id given to another process: the work folder
    # was judged a run still going, and every later run into out refused, for ever.
    out = tmp_path / "out"
    other = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE, text=True)
    try:
        for pid in (other.pid, os.getpid()):  # alive, but not started at clock tick 1
            (tmp_path / f".out.{pid}-1.0a1b2c3d.partial").mkdir()
        assert other_writer(out) is None
        _write(out)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
        # Named by an older version, without the start time: its process id alone decides.
        older = tmp_path / f".out.{other.pid}.0a1b2c3d.partial"
        older.mkdir()
        with pytest.raises(FileExistsError, match=f"being written by process {other.pid} "):
            _write(out)
        assert older.is_dir()
    finally:
        other.communicate("\n", timeout=60)
    _write(out)  # its process ended: deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with built_aside(out) as work:  # a live writer's, named with its start time, is kept
        assert re.fullmatch(rf"\.out\.{os.getpid()}-\d+\.[0-9a-f]{{8}}\.partial", work.name)
        remove_stale_work(out)
        assert work.is_dir()


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="no process states here")
def test_a_writer_killed_and_not_yet_reaped_is_not_a_run_going_on(tmp_path: Path) -> None:
    # Its parent (a launcher that has not waited for it yet) keeps its process id in use.
    out = tmp_path / "out"
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    stat = Path(f"/proc/{writer.pid}/stat")
    try:
        started = stat.read_bytes().rpartition(b")")[2].split()[19].decode()
        (tmp_path / f".out.{writer.pid}-{started}.0a1b2c3d.partial").mkdir()
        (tmp_path / f".out.{writer.pid}.0a1b2c3e.partial").mkdir()  # named by an older version
        assert other_writer(out) == writer.pid
        writer.kill()
        while stat.read_bytes().rpartition(b")")[2].split()[0] != b"Z":
            time.sleep(0.01)
        assert other_writer(out) is None
        _write(out)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    finally:
        writer.kill()
        writer.wait()
