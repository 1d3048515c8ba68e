"""The monitor's series bounded over a long run, and every check that reads them still right."""

from __future__ import annotations

import io
import math
from array import array
from collections.abc import Callable

import pytest
import torch

from treeqa.health import HealthMonitor, loss_levels, report
from treeqa.health.thinning import ROWS, Thinning, row

Readings = Callable[[int], dict[str, float]]


def long_run(n: int, readings: Readings, every: int = 50, rows: int = 2048) -> HealthMonitor:
    """A monitor given ``n`` steps' rows as ``end_step`` appends them (``readings``: the values
    of step s, NaN for the series it leaves out), its series thinned from ``rows`` rows on."""
    monitor = HealthMonitor(every=every, stream=io.StringIO())
    monitor.thinning = Thinning(rows=rows, recent=rows // 8)
    for s in range(1, n + 1):
        values = readings(s)
        values["step"] = s
        for name, series in monitor.series.items():
            series.append(values.get(name, math.nan))
        if s % every == 0 and "loss" in values:
            monitor.chance.append((s, 3, 1.0))
        if len(monitor.series["step"]) >= monitor.thinning.rows:
            monitor._thin()
    monitor.step = n
    return monitor


def codes(monitor: HealthMonitor) -> set[str]:
    monitor._series_checks(monitor.step)
    return {code for code, _ in monitor.findings}


def test_a_million_step_run_keeps_a_bounded_series() -> None:
    """~100 bytes a step, kept for every step, were ~96 MB after a million steps and grew
    without bound. Past ``ROWS`` rows the older steps are thinned, the recent ones kept."""
    monitor = HealthMonitor(every=50, stream=io.StringIO())
    for _ in range(ROWS + 1000):
        monitor.begin_step()
        monitor.end_step(1.0, 1e-3)
    steps = monitor.series["step"]
    assert len(steps) < ROWS and all(len(v) == len(steps) for v in monitor.series.values())
    assert list(steps[-1000:]) == list(range(ROWS + 1, ROWS + 1001))  # recent: whole
    assert list(steps) == sorted(steps) and steps[0] % monitor.thinning.stride == 0


def test_thinned_rows_keep_their_steps_and_the_recent_ones_stay_whole() -> None:
    for first in (1, 7, 1001):  # a resumed run's series start later
        thinning = Thinning(rows=64, recent=8)
        series = {"step": array("d"), "value": array("d")}
        for s in range(first, first + 5000):
            series["step"].append(s)
            series["value"].append(2.0 * s)
            if len(series["step"]) >= thinning.rows:
                thinning.thin(series)
        steps = [int(s) for s in series["step"]]
        assert len(steps) < 64 and steps[-8:] == list(range(first + 4992, first + 5000))
        assert list(series["value"]) == [2.0 * s for s in steps]
        old = [s for s in steps if s < thinning.whole_from]
        assert old == [s for s in range(steps[0], thinning.whole_from) if s % thinning.stride == 0]
        even = [int(s) for s in thinning.even(series["step"])]
        assert {b - a for a, b in zip(even, even[1:], strict=False)} == {thinning.stride}
        assert all(row(series["step"], s) == i for i, s in enumerate(steps))
        assert row(series["step"], steps[0] + 1) is None  # thinned out


def test_a_leak_is_memory_growth_in_a_thinned_run_and_a_flat_run_is_not() -> None:
    leak = long_run(20_000, lambda s: {"rss_mb": 400.0 + s / 200, "step_time": 0.01})
    assert leak.thinning.stride > 1 and "memory-growth" in codes(leak)
    wobble = long_run(20_000, lambda s: {"rss_mb": 400.0 + 10 * math.sin(s), "step_time": 0.01})
    assert "memory-growth" not in codes(wobble)


def test_fit_warm_up_is_left_out_of_memory_growth_after_thinning() -> None:
    """The first epoch's climb (RSS to its working size) is judged by steps, not rows: counted
    in the thinned rows, ~2/3 of the run would be taken for warm-up and the leak after missed,
    or a climb over most of the rows kept for warm-up."""

    def climb_then(after: Callable[[int], float]) -> Readings:
        return lambda s: {"rss_mb": 300.0 + s / 10 if s <= 1000 else after(s), "step_time": 0.01}

    flat = long_run(6000, climb_then(lambda s: 400.0 + 5 * (s // 700 % 2)), rows=512)
    flat.expect_epochs()
    assert flat.thinning.stride > 1 and "memory-growth" not in codes(flat)
    leak = long_run(6000, climb_then(lambda s: 400.0 + (s - 1000) / 50), rows=512)
    leak.expect_epochs()
    assert "memory-growth" in codes(leak)


def timed(step_ms: Callable[[int], float], cpu_ms: Callable[[int], float]) -> Readings:
    """A CPU run's readings: step and CPU time, the reference workload and the wait for a CPU
    read on every 4th step (NaN elsewhere), as the monitor reads them."""

    def readings(s: int) -> dict[str, float]:
        values = {"step_time": step_ms(s) / 1e3, "rss_mb": 400.0}
        if s % 4 == 0:
            values |= {"cpu_time": cpu_ms(s) / 1e3, "canary": 1e-5, "cpu_wait": 0.0}
        return values

    return readings


def test_steps_that_slow_down_are_found_in_a_thinned_run_and_steady_ones_are_not() -> None:
    n = 20_000
    slower = long_run(n, timed(lambda s: 2 + 6 * s / n, lambda s: 2 + 6 * s / n))
    assert slower.thinning.stride >= 4  # rows kept on every 4th step's readings
    assert "step-time-regression" in codes(slower)
    steady = long_run(n, timed(lambda s: 2 + math.sin(s), lambda s: 2 + math.sin(s)))
    assert "step-time-regression" not in codes(steady)
    # Slower, but not in CPU time: other jobs on the machine, not the script.
    crowded = long_run(n, timed(lambda s: 2 + 6 * s / n, lambda s: 2.0))
    assert "step-time-regression" not in codes(crowded)


def test_data_wait_of_the_latest_steps_is_read_whole_after_thinning() -> None:
    waits = long_run(
        20_000, lambda s: {"data_time": 0.03 if s > 19_800 else 0.0, "step_time": 0.01}
    )
    assert "input-bound" in codes(waits)
    assert "input-bound" not in codes(
        long_run(20_000, lambda s: {"step_time": 0.01, "data_time": 0.0})
    )


def test_loss_at_chance_and_diverged_are_read_at_their_steps_after_thinning() -> None:
    ln3 = math.log(3)
    chance = long_run(20_000, lambda s: {"loss": ln3 * (1 + 0.02 * math.sin(s))})
    assert chance.thinning.stride > 1 and len(chance.chance) < 20_000 // 50  # pruned with rows
    assert all(chance.thinning.keeps(s) for s, _, _ in chance.chance)
    found = loss_levels.loss_at_chance(chance.chance, chance.even("step"), chance.even("loss"))
    assert found is not None and found.code == "loss-at-chance"
    learns = long_run(20_000, lambda s: {"loss": ln3 * (1 - s / 40_000)})
    assert (
        loss_levels.loss_at_chance(learns.chance, learns.even("step"), learns.even("loss")) is None
    )
    # A loss read at each sampled step's own row: the steps between read far lower.
    aliased = long_run(20_000, lambda s: {"loss": ln3 if s % 50 == 0 else 0.2})
    assert (
        loss_levels.loss_at_chance(aliased.chance, aliased.even("step"), aliased.even("loss"))
        is None
    )
    climbs = long_run(20_000, lambda s: {"loss": ln3 * (0.3 if s < 5000 else 8.0)})
    found = loss_levels.loss_diverged(climbs.chance, climbs.even("step"), climbs.even("loss"))
    assert found is not None and found.evidence["early_min"] == pytest.approx(0.3 * ln3, 1e-3)


def test_a_late_loss_reading_lands_on_its_own_row_after_thinning() -> None:
    """A GPU loss is read steps later and put back by its step: after thinning, a row is no
    longer ``len - 1 - (step now - its step)`` rows back for an old step."""
    monitor = long_run(20_000, lambda s: {"loss": 1.0})
    monitor.losses.pending.append((19_990, torch.tensor(0.5), None))
    monitor.losses.pending.append((int(monitor.series["step"][0]) + 1, torch.tensor(0.25), None))
    monitor._read_losses(wait=True)  # the second one's row was thinned out: dropped
    losses = monitor.series["loss"]
    assert losses[row(monitor.series["step"], 19_990)] == 0.5  # type: ignore[index]
    assert sorted(set(losses)) == [0.5, 1.0]
    monitor.losses.pending.append((19_995, torch.tensor(math.nan), None))
    monitor._read_losses(wait=True)
    assert monitor.nonfinite.evidence == {"step": 19_995, "loss": "nan"}


def test_the_report_of_a_thinned_run_holds_evenly_spaced_steps_with_their_values() -> None:
    monitor = long_run(20_000, lambda s: {"loss": 2.0 * s})
    series = report.build(monitor)["series"]
    steps = series["step"]
    assert {b - a for a, b in zip(steps, steps[1:], strict=False)} == {monitor.thinning.stride}
    assert series["loss"] == [2.0 * s for s in steps] and steps[-1] > 19_000
