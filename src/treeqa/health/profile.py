"""Short ``torch.profiler`` windows that name the operator family dominating step time.

A window covers the compute of a few steps (each step from its first forward to its optimiser
step, so data loading between steps stays out): once after the first sampled interval, and
again (up to ``max_windows`` in all) when recent steps got 1.5x slower than early ones.
A window that finds a ``hot-op`` warning is a suspicion, not yet a finding: a second window
``CONFIRM_AFTER`` steps on must find the same family dominant (three steps of ~3 ms once read
copies at 53% where six runs of the same script read 18-27%: copies stretched ~10x, no CPU
wait to subtract). Where it does not, its own reading stands; a run that ends before it gives
the first window's as it read.
Profiled steps are marked so the timing checks can leave them out (the profiler slows them).
No window opens while the script's own ``torch.profiler`` is recording: stopping a second
profiler inside it would end the script's session. Nor does one open or stop inside a backward
(an optimiser stepped by a gradient hook ends its step there): a window that step ends stops as
the backward returns.

A window records operators and autograd nodes, not ``record_function`` ranges (torch's
``USER_SCOPE``): a collective's range is one (``gloo:all_reduce``), which the process group's
worker thread ends after completing the future DDP waits on. A profiler stopped in that gap, as
a step ends at its optimiser step, frees the events the range ends in, and the worker thread
wrote its end time into freed heap (valgrind: an invalid write from ``c10d::Work::finish``; a
DDP rank died with glibc's ``malloc(): unsorted double linked list corrupted``).

The profiler's cost grows with the operators a step runs, not with its time: a policy-gradient
episode of 400 tiny forwards records ~107,000 events. Each is ~4 us to stop the profiler and
~6 us to read here (``_op_times``; torch's ``key_averages`` takes ~65 us an event). So a window
ends after a step that recorded more than ``MAX_EVENTS``, and a later window opens only while
the windows so far took under ``BUDGET`` of the run's wall time.
The step thread's run-queue wait is read at each step's open and close: time spent waiting for
a CPU shows in whichever operator was running, which on a busy host can make any small op look
dominant (``checks.hot_op`` judges the window without it).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._C._profiler import ProfilerConfig, ProfilerState, RecordScope, _ExperimentalConfig
from torch.autograd import DeviceType

from treeqa.health import checks, timing
from treeqa.health.findings import Finding
from treeqa.health.runqueue import Reading, waited_since

# Events that are not operators: step markers, optimiser and runtime ranges.
_NOT_OPS = ("ProfilerStep", "[", "Optimizer.", "cuda", "enumerate(", "autograd::")
# Events torch's own tables leave out, their time counted in the operator around them.
_UTILITY = frozenset(
    (
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
        "[memory]",
        "[OutOfMemory]",
    )
)
MAX_EVENTS = 20_000
"""A window ends after a step that recorded more events than this (~0.2 s to stop and read)."""
BUDGET = 0.01
"""Later windows open only while the windows so far took under this share of wall time."""
CONFIRM_AFTER = 20
"""Steps from a window that read a ``hot-op`` warning to the window that must read it again."""
SCOPES = frozenset(s for s in RecordScope.__members__.values() if s != RecordScope.USER_SCOPE)
"""What a window records: every range torch opens but the script's and libraries' own
``record_function`` ones, which another thread may end after the window stops."""


def in_backward() -> bool:
    """Inside the autograd engine, in a hook a backward runs (an optimiser step fused into the
    backward). The engine runs it under its copy of the thread's profiler state and puts the
    thread's back on return: a profiler stopped there comes back on, recording the rest of the
    script, and one started there is gone."""
    return torch._C._current_graph_task_id() != -1


class ProfileWindow:
    def __init__(
        self,
        steps: int = 3,
        max_windows: int = 3,
        memory: Callable[[], float] | None = None,
        waited: Callable[[], Reading] | None = None,
        heap: Callable[[], tuple[float, float] | None] | None = None,
    ):
        """``memory``: the process's resident MB now; ``waited``: (the calling thread's id, the
        seconds it has waited for a CPU so far), NaN where unknown; ``heap``: the C heap's
        (in use, free) MB now, None where unknown."""
        self.steps, self.max_windows, self.memory, self.waited = steps, max_windows, memory, waited
        self.heap = heap
        self.cpu_wait = 0.0  # seconds the step thread waited for a CPU in this window's steps
        self._wait_begin: Reading = (-1, math.nan)
        self.conv_over_text = True  # a dense 2-D/3-D conv in models that embed tokens
        # MB the profiler itself left resident (not the run's growth), and of those, MB of the
        # C heap's in use and free: where its buffers are, RSS is none of the script's.
        self.memory_added, self.heap_added = 0.0, (0.0, 0.0)
        self._before: tuple[float, float, float] = (0.0, math.nan, math.nan)
        self.profiled: set[int] = set()  # steps whose compute was profiled
        self.windows = 0
        self.spent = 0.0  # seconds spent stopping the profiler and reading its events
        self.events = 0  # events recorded in the windows so far
        self._started = time.perf_counter()
        self._next: int | None = None  # first step of the scheduled or open window
        self._profiler: set[Any] | None = None  # the running profiler's activities
        self._ended: int | None = None  # a step that ended inside a backward, still recording
        self._times: dict[str, float] = {}
        self._covered: list[int] = []
        self._suspect: Finding | None = None  # a window's warning, until the next window's
        self._device = (0.0, 0)  # the open window's GPU-busy seconds and kernels
        self.device: tuple[float, float] | None = None
        """GPU-busy seconds and kernels per step of the window that closed last (None on a
        CPU, or once read: ``timing.device_idle`` judges it)."""

    @property
    def active(self) -> bool:
        """A window is open or scheduled."""
        return self._next is not None

    @property
    def recording(self) -> bool:
        """The profiler is on: this step's operators are recorded (its times are not the
        script's own)."""
        return self._profiler is not None

    def schedule(self, step: int) -> None:
        """Profile the compute of ``steps`` steps from ``step`` on, unless ``max_windows``
        were opened, those so far took ``BUDGET`` of the wall time since the start, or the
        steps run in a thread of the script's (no windows there: no ``hot-op``)."""
        if threading.current_thread() is not threading.main_thread():
            return  # torch's profiler, started in another thread, prints an error of its own
        within = self.spent <= BUDGET * (time.perf_counter() - self._started)
        if self._next is None and self.windows < self.max_windows and within:
            self._open_at(step)

    def _open_at(self, step: int) -> None:
        self._next, self._times, self._covered = step, {}, []
        self.cpu_wait, self._device = 0.0, (0.0, 0)
        self.windows += 1

    def schedule_if_slower(
        self,
        step_times: Sequence[float],
        next_step: int,
        canary: Sequence[float] | None = None,
        cpu_wait: Sequence[float] | None = None,
        work: Sequence[float] | None = None,
    ) -> None:
        """Schedule a window when the last 20 steps' median is 1.5x that of steps 5..25, at
        the early steps' machine speed where a reference workload was timed (``canary``,
        NaN where not): a host that got slower is no reason to profile. Nor is one where the
        share of step time spent waiting for a CPU (``cpu_wait``, NaN where not read) rose as
        ``timing.step_time_regression`` counts a rise: other processes arrived. Nor are
        steps that do more work (``work``: autograd nodes a step, NaN where not read), as
        the longer episodes of a policy-gradient loop do: the time is taken per node."""
        if len(step_times) < 60 or self.active:
            return
        recent, early = _median(step_times[-20:]), _median(step_times[5:25])
        if recent is None or early is None:
            return
        if cpu_wait is not None and len(cpu_wait) == len(step_times):
            before = timing.share(cpu_wait[5:25], step_times[5:25], 3)
            lately = timing.share(cpu_wait[-20:], step_times[-20:], 3)
            if before and lately and timing.wait_rose(before[0], lately[0]):
                return
        for scale in (canary, work):
            now, then = (_median(scale[-20:]), _median(scale[5:25])) if scale else (None, None)
            if now is not None and then is not None and then > 0:
                recent /= max(1.0, now / then)
        if recent > 1.5 * early:
            self.schedule(next_step)

    def begin(self, step: int) -> None:
        """The step's compute starts: open the profiler if this step is in the window."""
        if self._next is None or step < self._next or self._profiler is not None:
            return
        if in_backward():
            return
        if torch.autograd.profiler._is_profiler_enabled:
            # The script's own profiler is recording: a second one started and stopped inside
            # it ends the script's session (its key_averages() come back empty). The window is
            # given up; the script's profile is the script's.
            self._next, self._times, self._covered = None, {}, []
            return
        activities = {torch.profiler.ProfilerActivity.CPU}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.add(torch.profiler.ProfilerActivity.CUDA)
        self._before = self._memory()
        self._wait_begin = self.waited() if self.waited else (-1, math.nan)
        # Kineto prints a line to stderr at each start and stop ("USDT: ... profiler_start"):
        # noise in a training log. Read when the profiler first starts; a user's setting wins,
        # and the script's environment is left as it was.
        unset = "KINETO_LOG_LEVEL" not in os.environ
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        try:
            _start(activities)
            self._profiler = activities
        finally:
            if unset:
                os.environ.pop("KINETO_LOG_LEVEL", None)

    def end(self, step: int) -> Finding | None:
        """The step is done: close the profiler; the hot-op finding once the window is full,
        or once a step recorded more than ``MAX_EVENTS`` (the next would cost as much). A step
        that ends inside a backward stops the profiler as that backward returns."""
        if self._profiler is not None and in_backward():
            self._ended = step
            return None
        recorded = self._stop(step)
        return self.close() if len(self._covered) >= self.steps or recorded > MAX_EVENTS else None

    def backward_returned(self) -> Finding | None:
        """The backward that a profiled step ended inside has returned: stop the profiler now."""
        if self._ended is None:
            return None
        step, self._ended = self._ended, None
        return self.end(step)

    def close(self, step: int | None = None) -> Finding | None:
        """End the window now (also at the end of the run, at ``step``); its finding, if any."""
        if step is not None:
            self._stop(step if self._ended is None else self._ended)
            self._ended = None
        covered, self._next = self._covered, None
        if not covered:  # (the run ended before the window that was to confirm a warning)
            suspect, self._suspect = self._suspect, None
            return suspect
        self._covered = []
        if self._device[1]:
            busy, kernels = self._device
            self.device = (busy / len(covered), kernels / len(covered))
        found = checks.hot_op(self._times, len(covered), self.conv_over_text, self.cpu_wait * 1e6)
        if found is not None:
            found.where = next(iter(found.evidence["top_ops"]), "")
            found.evidence["steps"] = [covered[0], covered[-1]]
        return self._confirmed(found, covered[-1], ending=step is not None)

    def _confirmed(self, found: Finding | None, last: int, ending: bool) -> Finding | None:
        """This window's finding, where a warning stands: read by this window and by the one
        before it, which suspected it, or by this one alone when no other can follow (the run
        ends, or the thread cannot profile). A first warning the next window can judge is held
        for it, ``CONFIRM_AFTER`` steps on, whatever the window budget (one window more)."""
        suspect, self._suspect = self._suspect, None
        if found is None or found.severity != "warning":
            return found  # (where it followed a suspicion: not confirmed, this reading stands)
        if suspect is not None:
            if found.evidence["family"] == suspect.evidence["family"]:
                found.evidence["windows"] = [suspect.evidence["steps"], found.evidence["steps"]]
            else:  # two windows, two families: neither read twice
                found.severity = "info"
            return found
        if ending or threading.current_thread() is not threading.main_thread():
            return found
        self._suspect = found
        self._open_at(last + CONFIRM_AFTER)
        return None

    def _stop(self, step: int) -> int:
        """Stop the profiler (if open) and add its operators' times; the events it recorded."""
        activities, self._profiler = self._profiler, None
        if activities is None:
            return 0
        began = time.perf_counter()
        results = _stop(activities)
        if self.waited:
            waited = waited_since(self._wait_begin, self.waited())
            # NaN where unknown or on another thread: the window is then judged as it reads
            self.cpu_wait += waited if math.isfinite(waited) else 0.0
        self.profiled.add(step)
        self._covered.append(step)
        events = results.events()
        recorded = len(events)
        if torch.profiler.ProfilerActivity.CUDA in activities:
            busy, kernels = _device_busy(events)
            self._device = (self._device[0] + busy, self._device[1] + kernels)
        for name, t in _op_times(events).items():
            if not name.startswith(_NOT_OPS) and "#" not in name:
                self._times[name] = self._times.get(name, 0.0) + t
        del results, events  # (before the memory read: what they held and malloc kept is ours)
        rss, used, free = (
            max(0.0, b - a) for a, b in zip(self._before, self._memory(), strict=True)
        )
        self.memory_added += rss
        self.heap_added = (self.heap_added[0] + used, self.heap_added[1] + free)
        self.events += recorded
        self.spent += time.perf_counter() - began
        return recorded

    def _memory(self) -> tuple[float, float, float]:
        """Resident MB and the C heap's MB in use and free now (0 and NaN where not read)."""
        used, free = (self.heap() if self.heap else None) or (math.nan, math.nan)
        return (self.memory() if self.memory else 0.0), used, free


def _start(activities: set[Any]) -> None:
    """Start torch's profiler on this thread over ``SCOPES``, as ``torch.profiler.profile``
    starts it over all of them (it takes no scopes)."""
    config = ProfilerConfig(
        ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig()
    )
    torch._C._autograd._prepare_profiler(config, activities)
    torch.autograd.profiler._run_on_profiler_start()
    # (torch's stub leaves out the scopes its binding takes)
    torch._C._autograd._enable_profiler(config, activities, set(SCOPES))  # type: ignore[call-arg]


def _stop(activities: set[Any]) -> Any:
    """Stop the profiler ``_start`` started; its results (``.events()``)."""
    if torch.profiler.ProfilerActivity.CUDA in activities:
        torch.cuda.synchronize()  # as torch.profiler does: the kernels launched are in
    results = torch._C._autograd._disable_profiler()
    torch.autograd.profiler._run_on_profiler_stop()
    return results


def _op_times(events: Sequence[Any]) -> dict[str, float]:
    """Microseconds of self time per operator name in the profiler's events (``KinetoEvent``):
    on the CPU an event's duration less that of the events nested in it on its thread (as
    torch's ``key_averages`` counts ``self_cpu_time_total``), and each device kernel's duration
    added to the operator that launched it. One pass, ~6 us an event."""
    cpu: list[tuple[int, int, int, str]] = []  # (thread, start, -end, name): sorted, nested
    kernels: list[tuple[int, int]] = []  # (the launching operator's correlation id, ns)
    launched_by: dict[int, str] = {}
    for e in events:
        name = e.name()
        if name in _UTILITY:
            continue
        if e.device_type() != DeviceType.CPU:
            kernels.append((e.linked_correlation_id(), e.duration_ns()))
        elif not e.is_async() and e.start_thread_id() == e.end_thread_id():
            start = e.start_ns()  # (torch 2.4's events have no end_ns)
            cpu.append((e.start_thread_id(), start, -(start + e.duration_ns()), name))
            if e.linked_correlation_id() == 0:  # an operator (a runtime call links to one)
                launched_by[e.correlation_id()] = name
    cpu.sort()  # by thread, then start; an enclosing event before those it holds
    times: dict[str, float] = {}
    enclosing: list[tuple[int, int, str]] = []  # (thread, end, name) of the events around it
    for thread, start, neg_end, name in cpu:
        end = -neg_end
        while enclosing and (
            enclosing[-1][0] != thread or start >= enclosing[-1][1] or end > enclosing[-1][1]
        ):
            enclosing.pop()
        us = (end - start) / 1e3
        if enclosing:
            parent = enclosing[-1][2]
            times[parent] = times.get(parent, 0.0) - us
        times[name] = times.get(name, 0.0) + us
        enclosing.append((thread, end, name))
    for corr, ns in kernels:
        name = launched_by.get(corr, "") if corr else ""
        if name:
            times[name] = times.get(name, 0.0) + ns / 1e3
    return times


def _device_busy(events: Sequence[Any]) -> tuple[float, int]:
    """Seconds in which the device ran anything (the union of its kernels' and copies'
    intervals: kernels on several streams overlap), and how many it ran."""
    spans = sorted(
        (e.start_ns(), e.start_ns() + e.duration_ns())
        for e in events
        if e.device_type() != DeviceType.CPU and e.name() not in _UTILITY
    )
    busy, end = 0, -1
    for start, stop in spans:
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return busy / 1e9, len(spans)


def _median(values: Sequence[float]) -> float | None:
    finite = sorted(v for v in values if math.isfinite(v))
    return finite[len(finite) // 2] if finite else None
