"""Checkpoint files on disk: what a write replaces, and what it leaves alone."""

import os
from pathlib import Path

from treeqa.train import checkpoint as ckpt


def test_a_text_written_through_a_link_or_to_a_device_keeps_them(tmp_path: Path) -> None:
    # --write-predictions through a link replaced the link with a file; to /dev/null (or
    # /dev/stdout), it would put a plain file in its place.
    (tmp_path / "runs").mkdir()
    link = tmp_path / "predictions.json"
    link.symlink_to(tmp_path / "runs" / "answers.json")
    ckpt.write_text_atomic(link, "{}")
    assert link.is_symlink() and (tmp_path / "runs" / "answers.json").read_text() == "{}"
    device = tmp_path / "null"
    device.symlink_to(os.devnull)
    ckpt.write_text_atomic(device, "{}")
    assert device.is_symlink() and Path(os.devnull).is_char_device()
    assert sorted(p.name for p in tmp_path.rglob("*")) == [
        "answers.json",
        "null",
        "predictions.json",
        "runs",
    ]
