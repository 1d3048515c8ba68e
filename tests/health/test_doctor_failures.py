"""The monitor's own failures never stop the script or run it watches: a hook that raises stops
the monitoring (said once on stderr), a wrapped library call that fails to be noted still runs,
the script's output and exit code stay its own, and fit() trains on."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from test_monitor import Tiny, batches  # the monitor tests' model and batches

from treeqa.health import HealthMonitor, loss_levels, run_doctor
from treeqa.health.clipping import Clipping
from treeqa.health.losses import LossInputCheck
from treeqa.train.loop import TrainConfig, fit

SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
params = model.parameters()
for step in range(40):
    x = torch.randn(16, 8)
    loss = F.cross_entropy(model(x), x[:, :3].argmax(1))
    opt.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    opt.step()
print("trained", step + 1, "clipped to", float(norm) > 0)  # 0: a clip given no parameters
"""


def _broken(*args: object, **kwargs: object) -> None:
    raise RuntimeError("a bug of the monitor's own")


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    code, _ = run_doctor(["python", str(script)], stream=io.StringIO())
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_failing_step_hook_stops_monitoring_not_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(HealthMonitor, "end_step", _broken)
    code, out, err = _run(tmp_path, capsys)
    assert code == 0 and out == "trained 40 clipped to True\n"
    assert err.count("the monitor failed (RuntimeError: a bug of the monitor's own") == 1
    assert "it stops watching and the script goes on" in err


def test_the_report_says_the_monitor_failed_not_a_clean_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its counts stop where it stopped watching: the report lists the failure, and the summary
    says what it missed, so "no findings" is not read as a clean run."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    calls = []

    def fails_at_step_10(monitor: HealthMonitor, *args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) == 10:
            raise RuntimeError("a bug of the monitor's own")
        original(monitor, *args, **kwargs)

    original = HealthMonitor.end_step
    monkeypatch.setattr(HealthMonitor, "end_step", fails_at_step_10)
    summary = io.StringIO()
    code, report = run_doctor(["python", str(script)], stream=summary)
    assert code == 0 and report["steps"] == 9
    (failure,) = report["monitor_failures"]
    assert failure.startswith("the monitor failed (RuntimeError: a bug of the monitor's own")
    assert "the monitor's own code failed (1 time, said above)" in summary.getvalue()
    monkeypatch.undo()
    _, clean = run_doctor(["python", str(script)], stream=io.StringIO())
    assert clean["monitor_failures"] == [] and clean["steps"] == 40


def test_a_failing_final_check_still_makes_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run-wide check at the run's end that raises (a vmapped target's sums read after the
    transform once did) loses those checks, not the report: its findings and series stay, and
    the failure is listed."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    monkeypatch.setattr(loss_levels, "loss_diverged", _broken)
    code, report = run_doctor(["python", str(script)], stream=io.StringIO())
    assert code == 0 and report["steps"] == 40 and len(report["series"]["loss"]) == 40
    (failure,) = report["monitor_failures"]
    assert failure.startswith("the monitor's final checks failed (RuntimeError: a bug of")
    assert "the report is made without them" in failure


def test_a_failing_note_leaves_the_wrapped_call_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LossInputCheck, "_inspect", _broken)
    monkeypatch.setattr(Clipping, "_judge", _broken)  # after the parameters were read
    code, out, err = _run(tmp_path, capsys)
    assert code == 0 and out == "trained 40 clipped to True\n"  # the clips got their parameters
    assert err.count("the check on cross_entropy failed") == 1
    assert err.count("the check on gradient clipping failed") == 1


def test_fit_trains_on_when_the_monitor_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(HealthMonitor, "end_step", _broken)
    monitor = HealthMonitor(json_path=tmp_path / "health.json", stream=io.StringIO())
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = fit(model, opt, batches, TrainConfig(epochs=2, device="cpu"), callbacks=[monitor])
    assert state.step == 60  # both epochs
    err = capsys.readouterr().err
    assert err.count("the monitor failed (RuntimeError") == 1
    assert "it stops watching and training goes on" in err
    assert torch.nn.functional.cross_entropy.__name__ == "cross_entropy"  # wrappers undone
