"""The JSON report: written whole or not at all to a file, as it is to a pipe."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from treeqa.health import report


def test_a_report_that_fails_to_be_written_leaves_the_old_one_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "health.json"
    report.write_json({"steps": 1}, path)
    assert json.loads(path.read_text()) == {"steps": 1}

    def killed(src: object, dst: object) -> None:  # the process dies before the rename
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(OSError, match="health.json: could not be written"):
        report.write_json({"steps": 2, "findings": ["x" * 10_000]}, path)
    assert json.loads(path.read_text()) == {"steps": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["health.json"]


def test_a_report_to_a_pipe_is_written_into_it(tmp_path: Path) -> None:
    # --json /dev/stdout, say: no temporary file beside a device or pipe, no rename over it.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    report.write_json({"steps": 3}, fifo)
    reader.join(timeout=30)
    assert json.loads(got[0]) == {"steps": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]
