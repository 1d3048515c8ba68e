"""The JSON report: written whole or not at all to a file, as it is to a pipe."""

from __future__ import annotations

import io
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


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="no /proc (Linux only)")
def test_a_report_to_a_link_is_written_through_it(tmp_path: Path) -> None:
    # --json /dev/stdout with the output redirected to a file: /dev/stdout links to it, and a
    # rename over the link replaced the link while the redirected output stayed empty.
    out = tmp_path / "out.txt"
    with out.open("w") as f:
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{f.fileno()}")
        report.write_json({"steps": 4}, link)
    assert link.is_symlink()
    assert json.loads(out.read_text()) == {"steps": 4}


@pytest.mark.parametrize(
    ("steps", "said"),
    [
        (0, "0 steps (resumed after step 100), 1 finding"),
        (1, "1 step (step 101, resumed after step 100), 1 finding"),
        (20, "20 steps (101-120, resumed after step 100), 1 finding"),
    ],
)
def test_a_resumed_run_s_summary_names_the_steps_it_covers(steps: int, said: str) -> None:
    # A resumed run stopped before its first step read "0 steps (101-100, ...)".
    finding = {"severity": "info", "code": "x", "step": 100, "message": "m", "where": "", "fix": ""}
    result = {"findings": [finding], "steps": steps, "resumed_at": 100, "series": {}}
    stream = io.StringIO()
    report.print_summary(result, stream)
    assert said in stream.getvalue()


def test_a_pipe_is_a_report_path_a_monitor_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked as writable itself, not by making a file beside it, which /dev refuses a user.
    import tempfile

    from treeqa.health import HealthMonitor
    from treeqa.health.script import writable

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    writable("--json", fifo)
    HealthMonitor(json_path=fifo)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_long_run_reports_a_bounded_number_of_points_per_series() -> None:
    from treeqa.health.monitor import HealthMonitor

    monitor = HealthMonitor()
    steps = 100_007  # whole, 10.5 MB of JSON here; a real run's wrote ~210 bytes a step
    for name, values in monitor.series.items():
        values.extend(float(s) * (2 if name == "loss" else 1) for s in range(1, steps + 1))
    monitor.step = steps
    result = report.build(monitor)
    assert len(json.dumps(result)) < 5_000_000
    series = result["series"]
    assert all(0 < len(vs) <= report.REPORT_POINTS for vs in series.values())
    assert len({len(vs) for vs in series.values()}) == 1  # every series at the same steps
    assert series["step"][:2] == [1, 7] and all(isinstance(s, int) for s in series["step"])
    assert series["loss"] == [2.0 * s for s in series["step"]]  # each value with its own step
    assert result["steps"] == steps
