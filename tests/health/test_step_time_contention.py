"""step-time-regression on a CPU shared with other processes: steps that waited for a CPU.

Seen in CI: a clean 120-step GRU (two torch threads, two cores) got 1.92x slower when other
jobs took the cores half-way; its CPU time per step grew too (OpenMP threads spinning at
barriers for a preempted sibling) and the ~10 us reference workload slowed by only 1.06x.
"""

from __future__ import annotations

import io
import math
import threading

import pytest

from treeqa.health import HealthMonitor, checks
from treeqa.health.runqueue import RunQueue

N = 120


def ramp(start: float, end: float, n: int = N) -> list[float]:
    """``start`` until a quarter of the way, then rising evenly to ``end``."""
    return [start + (end - start) * max(0.0, (i - n / 4) / (0.75 * n)) for i in range(n)]


def test_steps_stretched_by_other_processes_are_no_regression() -> None:
    steps = ramp(0.005, 0.0115)  # 5 -> 11.5 ms: ~1.9x by the last quarter
    cpu = ramp(0.010, 0.016)  # spinning threads: CPU time rises too (1.4x)
    canary = [12e-6] * N  # the short reference workload is rarely preempted
    # The share of each step its thread spent waiting for a CPU: 0 on the quiet machine,
    # about half once two more busy processes share the two cores.
    wait = [t * share for t, share in zip(steps, ramp(0.0, 0.5), strict=True)]
    assert checks.step_time_regression(steps, cpu, canary) is not None  # before: a finding
    assert checks.step_time_regression(steps, cpu, canary, wait) is None


def test_a_step_that_does_more_work_is_found_whatever_the_machine_does() -> None:
    steps = ramp(0.005, 0.0125)
    canary = [12e-6] * N
    for share in (0.0, 0.3, 0.75):  # a quiet machine, a steadily busy one, a saturated one
        wait = [t * share for t in steps]
        found = checks.step_time_regression(steps, steps, canary, wait)
        assert found is not None, share
        assert found.evidence["cpu_wait_share"] == [share, share]
    # A share of waiting that rises by less than WAIT_RISE (0 -> 2%) does not hide a leak.
    wait = [t * 0.02 * i / N for i, t in enumerate(steps)]
    assert checks.step_time_regression(steps, steps, canary, wait) is not None
    # Where the kernel gives no run-queue delay (macOS), the check runs as it did without it.
    missing = [math.nan] * N
    assert checks.step_time_regression(steps, steps, canary, missing) is not None


def test_a_leak_on_a_saturated_host_whose_share_wanders_is_still_found() -> None:
    """Seen under the corpus test on a host with load ~9 on 2 cores: the memory-bank bug's
    steps 14 -> 37 ms while its thread waited 0.637, 0.649, 0.645, 0.657 of the time; a
    wander of 0.02-0.03 there is noise, not a process arriving."""
    steps = ramp(0.014, 0.040)
    share = [0.637, 0.649, 0.645, 0.67]
    wait = [t * share[min(3, i * 4 // N)] for i, t in enumerate(steps)]
    assert checks.step_time_regression(steps, steps, [12e-6] * N, wait) is not None


def test_longer_steps_on_a_steadily_busy_machine_are_still_found() -> None:
    """Other processes take 40% of the time throughout, but in slices: a short step is mostly
    not preempted at all, a long one each time. The median step's share of waiting rises
    (0 -> 0.4) while the share of time spent waiting stays 0.4: the work grew, not the load."""
    steps, work, wait = [], [], []
    for i in range(N):
        w = 1e-3 * (1 + 2 * i / N)  # 1 -> 3 ms of work
        preempted = 1 + min(3, 4 * i // N)  # of each 4 steps: 1, then 2, 3, 4
        x = 0.4 * 4 * w / (0.6 * preempted) if i % 4 < preempted else 0.0
        steps.append(w + x)
        work.append(w)
        wait.append(x)
    found = checks.step_time_regression(steps, work, [12e-6] * N, wait)
    assert found is not None
    assert found.evidence["cpu_wait_share"] == pytest.approx([0.4, 0.4], abs=0.01)
    per_step = checks.quarter_medians([x / t for x, t in zip(wait, steps, strict=True)], 6)
    assert per_step is not None and per_step[0] == 0 and per_step[3] > 0.3


def test_the_wait_is_read_on_the_steps_whose_cpu_time_is_read() -> None:
    monitor = HealthMonitor(every=1000, stream=io.StringIO())
    for _ in range(240):
        monitor.begin_step()
        monitor.end_step(1.0, 0.01)
    read = {
        name: [i + 1 for i, t in enumerate(monitor.series[name]) if not math.isnan(t)]
        for name in ("cpu_time", "cpu_wait")
    }
    if RunQueue().waited()[1] != RunQueue().waited()[1]:  # NaN: no schedstat here
        assert read["cpu_wait"] == []
        return
    assert read["cpu_wait"] == read["cpu_time"] == [*range(1, 201), *range(204, 241, 4)]
    assert all(0 <= t < 1 for t in monitor.series["cpu_wait"][:200])


def test_a_step_that_ends_on_another_thread_has_no_wait() -> None:
    """Run-queue delay is counted per thread: the two readings must come from the same one."""
    monitor = HealthMonitor(every=1000, stream=io.StringIO())
    monitor.begin_step()
    other = threading.Thread(target=monitor.end_step, args=(1.0, 0.01))
    other.start()
    other.join()
    assert math.isnan(monitor.series["cpu_wait"][0])


def test_a_missing_schedstat_reads_nan() -> None:
    reader = RunQueue()
    reader.missing = True
    assert math.isnan(reader.waited()[1])


def test_steps_preempted_more_often_on_a_host_loaded_throughout_are_no_regression() -> None:
    """Seen on clean corpus scripts (clean_gru.py, clean_ctc.py, ...) at load 5-9 on 2 cores:
    the thread waited for a CPU ~60% of the time from the start, and more processes arriving
    took that to 72%, a rise under a third of its level. The steps' own time grew 1.3x (caches
    shared with the newcomers), CPU time with it, and wall time 1.9x with the wait."""
    own = ramp(0.001, 0.0014)
    shares = ramp(0.6, 0.72)
    steps = [t / (1 - share) for t, share in zip(own, shares, strict=True)]
    wait = [t - o for t, o in zip(steps, own, strict=True)]
    canary = [12e-6] * N
    waited = checks.quarter_shares(wait, steps, checks.warmup_of(N))
    assert waited is not None and not checks.wait_rose(waited[0], waited[3])
    assert checks.step_time_regression(steps, own, canary) is not None  # without the wait
    assert checks.step_time_regression(steps, own, canary, wait) is None
    # The same load over a leak: the steps' own time 2.5x slower is still found, and said.
    own = ramp(0.001, 0.0025)
    steps = [t / (1 - share) for t, share in zip(own, shares, strict=True)]
    wait = [t - o for t, o in zip(steps, own, strict=True)]
    found = checks.step_time_regression(steps, own, canary, wait)
    assert found is not None and "less waits for a CPU" in found.message
    assert found.evidence["ratio"] == pytest.approx(2.2, abs=0.1)


def test_less_wait_keeps_unread_steps_unread() -> None:
    out = checks.less_wait([0.004, 0.002, 0.001], [0.003, math.nan, 0.005])
    assert out[0] == pytest.approx(0.001)
    assert math.isnan(out[1])  # the wait was not read on this step
    assert out[2] == 0.0  # never below zero
