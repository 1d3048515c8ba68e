"""Short ``torch.profiler`` windows that name the operator family dominating step time.

A window covers the compute of a few steps (each step from its first forward to its optimiser
step, so data loading between steps stays out): once after the first sampled interval, and
again (up to ``max_windows`` in all) when recent steps got 1.5x slower than early ones.
Profiled steps are marked so the timing checks can leave them out (the profiler slows them).
The step thread's run-queue wait is read at each step's open and close: time spent waiting for
a CPU shows in whichever operator was running, which on a busy host can make any small op look
dominant (``checks.hot_op`` judges the window without it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from treeqa.health import checks
from treeqa.health.findings import Finding
from treeqa.health.runqueue import Reading, waited_since

# Rows of key_averages() that are not operators: step markers, optimiser and runtime ranges.
_NOT_OPS = ("ProfilerStep", "[", "Optimizer.", "cuda", "enumerate(", "autograd::")


class ProfileWindow:
    def __init__(
        self,
        steps: int = 3,
        max_windows: int = 3,
        memory: Callable[[], float] | None = None,
        waited: Callable[[], Reading] | None = None,
    ):
        """``memory``: the process's resident MB now; ``waited``: (the calling thread's id, the
        seconds it has waited for a CPU so far), NaN where unknown."""
        self.steps, self.max_windows, self.memory, self.waited = steps, max_windows, memory, waited
        self.cpu_wait = 0.0  # seconds the step thread waited for a CPU in this window's steps
        self._wait_begin: Reading = (-1, math.nan)
        self.conv_over_text = True  # a dense 2-D/3-D conv in models that embed tokens
        self.memory_added = 0.0  # MB the profiler itself left resident (not the run's growth)
        self._memory_before = 0.0
        self.profiled: set[int] = set()  # steps whose compute was profiled
        self.windows = 0
        self._next: int | None = None  # first step of the scheduled or open window
        self._profiler: Any = None
        self._times: dict[str, float] = {}
        self._covered: list[int] = []

    @property
    def active(self) -> bool:
        return self._next is not None

    def schedule(self, step: int) -> None:
        """Profile the compute of ``steps`` steps from ``step`` on."""
        if self._next is None and self.windows < self.max_windows:
            self._next, self._times, self._covered = step, {}, []
            self.cpu_wait = 0.0
            self.windows += 1

    def schedule_if_slower(
        self,
        step_times: Sequence[float],
        next_step: int,
        canary: Sequence[float] | None = None,
        cpu_wait: Sequence[float] | None = None,
    ) -> None:
        """Schedule a window when the last 20 steps' median is 1.5x that of steps 5..25, at
        the early steps' machine speed where a reference workload was timed (``canary``,
        NaN where not): a host that got slower is no reason to profile. Nor is one where the
        share of step time spent waiting for a CPU (``cpu_wait``, NaN where not read) rose as
        ``checks.step_time_regression`` counts a rise: other processes arrived."""
        if len(step_times) < 60 or self.active:
            return
        recent, early = _median(step_times[-20:]), _median(step_times[5:25])
        if recent is None or early is None:
            return
        if cpu_wait is not None and len(cpu_wait) == len(step_times):
            before = checks.share(cpu_wait[5:25], step_times[5:25], 3)
            lately = checks.share(cpu_wait[-20:], step_times[-20:], 3)
            if before and lately and checks.wait_rose(before[0], lately[0]):
                return
        if canary is not None:
            now, then = _median(canary[-20:]), _median(canary[5:25])
            if now is not None and then is not None and then > 0:
                recent /= max(1.0, now / then)
        if recent > 1.5 * early:
            self.schedule(next_step)

    def begin(self, step: int) -> None:
        """The step's compute starts: open the profiler if this step is in the window."""
        if self._next is None or step < self._next or self._profiler is not None:
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._memory_before = self.memory() if self.memory else 0.0
        self._wait_begin = self.waited() if self.waited else (-1, math.nan)
        # Kineto prints a line to stderr at each start and stop ("USDT: ... profiler_start"):
        # noise in a training log. Read when the profiler first starts; a user's setting wins.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        self._profiler = torch.profiler.profile(activities=activities)
        self._profiler.__enter__()

    def end(self, step: int) -> Finding | None:
        """The step is done: close the profiler; the hot-op finding once the window is full."""
        self._stop(step)
        return self.close() if len(self._covered) >= self.steps else None

    def close(self, step: int | None = None) -> Finding | None:
        """End the window now (also at the end of the run, at ``step``); its finding, if any."""
        if step is not None:
            self._stop(step)
        covered, self._next = self._covered, None
        if not covered:
            return None
        self._covered = []
        found = checks.hot_op(self._times, len(covered), self.conv_over_text, self.cpu_wait * 1e6)
        if found is not None:
            found.where = next(iter(found.evidence["top_ops"]), "")
            found.evidence["steps"] = [covered[0], covered[-1]]
        return found

    def _stop(self, step: int) -> None:
        prof, self._profiler = self._profiler, None
        if prof is None:
            return
        prof.__exit__(None, None, None)
        if self.waited:
            waited = waited_since(self._wait_begin, self.waited())
            # NaN where unknown or on another thread: the window is then judged as it reads
            self.cpu_wait += waited if math.isfinite(waited) else 0.0
        self.profiled.add(step)
        if self.memory:
            self.memory_added += max(0.0, self.memory() - self._memory_before)
        self._covered.append(step)
        for evt in prof.key_averages():
            if evt.key.startswith(_NOT_OPS) or "#" in evt.key:
                continue
            t = float(evt.self_cpu_time_total) + float(
                getattr(evt, "self_device_time_total", 0.0) or 0.0
            )
            self._times[evt.key] = self._times.get(evt.key, 0.0) + t


def _median(values: Sequence[float]) -> float | None:
    finite = sorted(v for v in values if math.isfinite(v))
    return finite[len(finite) // 2] if finite else None
