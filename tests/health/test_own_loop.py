"""HealthMonitor driven as docs/health.md shows it: a loop of one's own, several models, its
arguments; and the monitor of a fit() run resumed from a checkpoint."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from treeqa.health import HealthMonitor
from treeqa.health import monitor as health
from treeqa.models.common import Output
from treeqa.train.loop import TrainConfig, TrainState, fit


class Probe(nn.Module):
    """A linear probe: the backbone runs under no_grad and is left out of the optimiser."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(8, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            h = torch.tanh(self.backbone(x))
        return self.head(h)


def own_loop(monitor: HealthMonitor, steps: int, *models: nn.Module) -> None:
    """The loop docs/health.md describes: begin_step, forward, backward, step, end_step."""
    params = [p for m in models for p in m.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.05)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
        began = time.perf_counter()
        monitor.begin_step()
        loss = sum(nn.functional.cross_entropy(m(x), y) for m in models)
        opt.zero_grad()
        loss.backward()  # type: ignore[union-attr]
        opt.step()
        monitor.end_step(loss, time.perf_counter() - began)


def test_a_later_watch_keeps_what_an_earlier_one_was_told_is_trained() -> None:
    probe, other = Probe(), nn.Linear(8, 3)
    monitor = HealthMonitor(every=10, stream=io.StringIO())
    monitor.watch(probe, trained=probe.head.parameters())
    monitor.watch(other)  # a second model, all of whose parameters train
    opt = torch.optim.SGD([*probe.head.parameters(), *other.parameters()], lr=0.05)
    g = torch.Generator().manual_seed(0)
    for _ in range(12):
        x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
        monitor.begin_step()
        loss = nn.functional.cross_entropy(probe(x), y) + nn.functional.cross_entropy(other(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        monitor.end_step(loss, 0.001)
    result = monitor.finish()
    assert [f["code"] for f in result["findings"] if f["code"] == "unused-parameter"] == []
    # ... while a parameter of the second model that trains nothing is still found
    dead = nn.Linear(8, 3)
    dead.unused = nn.Parameter(torch.zeros(2))  # type: ignore[assignment]
    monitor = HealthMonitor(every=10, stream=io.StringIO())
    monitor.watch(probe, trained=probe.head.parameters())
    monitor.watch(dead)
    own_loop(monitor, 6, dead)
    found = [f for f in monitor.finish()["findings"] if f["code"] == "unused-parameter"]
    assert len(found) == 1 and "model1.unused" in found[0]["message"]
    assert "backbone" not in found[0]["message"]


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"mode": "off"}, "expected on | strict"),
        ({"every": 0}, "every=0: expected a positive int"),
        ({"every": -5}, "every=-5"),
        ({"every": 2.5}, "every=2.5"),
        ({"every": "50"}, "every='50'"),
        ({"scan_budget": 0}, "scan_budget=0"),
        ({"scan_budget": 2}, "scan_budget=2"),
        ({"plot_path": "report.txt"}, "name the image format"),
    ],
)
def test_bad_arguments_are_said_before_the_run(kwargs: dict, said: str) -> None:
    with pytest.raises(ValueError, match=said.replace("|", r"\|").replace("(", r"\(")):
        HealthMonitor(**kwargs)


def test_a_report_path_that_cannot_be_written_is_said_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="json_path .*: a directory"):
        HealthMonitor(json_path=tmp_path)
    locked = tmp_path / "locked.json"
    locked.write_text("{}")
    locked.chmod(0o444)
    if not os.access(locked, os.W_OK):  # (root may write it anyway)
        with pytest.raises(ValueError, match="read-only"):
            HealthMonitor(json_path=locked)


def test_watch_takes_modules_and_a_bad_one_leaves_the_monitor_usable() -> None:
    monitor = HealthMonitor(stream=io.StringIO())
    with pytest.raises(TypeError, match="nn.Module models, not Tensor"):
        monitor.watch(nn.Linear(2, 2), torch.zeros(3))  # type: ignore[arg-type]
    assert monitor.models == []
    monitor.watch(nn.Linear(8, 3))  # still works
    assert len(monitor.models) == 1


def test_strict_mode_in_an_own_loop_asks_the_loop_to_stop() -> None:
    class Softmaxed(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(super().forward(x), -1)

    model = Softmaxed(8, 3)
    monitor = HealthMonitor(mode="strict", every=10, stream=io.StringIO())
    monitor.watch(model)
    monitor.install_loss_checks()
    try:
        own_loop(monitor, 1, model)
    finally:
        monitor.uninstall()
    assert monitor.stop_requested  # what the loop checks after end_step, as documented


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
        self.unused = nn.Linear(3, 3)  # never called: a real unused parameter

    def forward(self, batch: torch.Tensor) -> Output:
        logits = self.body(batch[:, :8])
        return Output(logits, nn.functional.cross_entropy(logits, batch[:, 8].long()))


def batches(epoch: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(epoch)
    return [
        torch.cat([torch.randn(16, 8, generator=g), torch.randint(0, 3, (16, 1), generator=g)], 1)
        for _ in range(30)
    ]


def test_a_resumed_fit_reports_its_own_steps_and_checks_them_as_a_new_runs(
    tmp_path: Path,
) -> None:
    stream = io.StringIO()
    monitor = HealthMonitor(every=10, json_path=tmp_path / "health.json", stream=stream)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    resumed = TrainState(epoch=2, step=60)
    state = fit(
        model, opt, batches, TrainConfig(epochs=4, device="cpu"), callbacks=[monitor], state=resumed
    )
    assert state.step == 120
    report = json.loads((tmp_path / "health.json").read_text())
    assert report["steps"] == 60 and report["resumed_at"] == 60
    assert report["series"]["step"][0] == 61 and report["series"]["step"][-1] == 120
    # The first steps after the resume are sampled: the unused layer is found
    assert any(f["code"] == "unused-parameter" for f in report["findings"])
    assert monitor.retention.first == 60  # gc scans at the run's own steps 8 and 32
    summary = stream.getvalue()
    assert "60 steps (61-120, resumed after step 60)" in summary


def test_resuming_a_run_that_stopped_early_keeps_its_report(tmp_path: Path) -> None:
    stopped = TrainState(epoch=3, step=90, best_epoch=1)  # no better score for 2 epochs

    def train(patience: int) -> TrainConfig:
        return TrainConfig(epochs=10, patience=patience)

    assert health.for_run(train(2), tmp_path, stopped, True) is None
    # a larger patience trains on, and is watched
    assert health.for_run(train(3), tmp_path, stopped, True) is not None
    assert health.for_run(train(0), tmp_path, stopped, True) is not None  # no early stopping
