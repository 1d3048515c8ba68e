"""The run-wide checks over the monitor's series of time and memory: step time rising, memory
rising, the step waiting for data, the device idle. Plain functions over series, tested on their
own; ``monitor.py`` decides when to call them."""

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from treeqa.health.findings import Finding


def quarter_medians(values: Sequence[float], warmup: int) -> list[float] | None:
    """Medians of the finite values in four consecutive quarters of the steps after ``warmup``
    (a series read on some steps only, NaN elsewhere, keeps its quarters aligned with the
    steps'); None if there are fewer than 40 finite values or under 5 in a quarter.

    A long quarter is sampled at an odd stride (every k-th step, at most ~2,000 steps), so a
    check costs the same late in a long run as early on; an odd k meets every residue of a
    series read every 4th step."""
    quarters = _sorted_quarters(values, warmup)
    return None if quarters is None else [statistics.median(part) for part in quarters]


def quarter_lows(values: Sequence[float], warmup: int) -> list[float] | None:
    """The lowest tenth of the finite values in each quarter, as ``quarter_medians`` takes its
    quarters."""
    quarters = _sorted_quarters(values, warmup)
    return None if quarters is None else [part[(len(part) - 1) // 10] for part in quarters]


def _sorted_quarters(values: Sequence[float], warmup: int) -> list[list[float]] | None:
    """The finite values of each quarter after ``warmup``, sampled and sorted, as
    ``quarter_medians`` says; None where there are too few."""
    rest = values[warmup:]
    q = len(rest) // 4
    k = (q // 1024) | 1
    quarters = [sorted(filter(math.isfinite, rest[i * q : (i + 1) * q : k])) for i in range(4)]
    if sum(map(len, quarters)) < 40 or min(map(len, quarters)) < 5:
        return None
    return quarters


def rising(medians: Sequence[float], slack: float = 1.0) -> bool:
    """Each quarter at least ``slack`` times the one before (slack < 1 tolerates timing noise)."""
    return all(b >= slack * a for a, b in zip(medians, medians[1:], strict=False))


def one_jump(medians: Sequence[float]) -> bool:
    """Nearly all of the rise (>= 85%) between two neighbouring quarters: a one-time change
    (a backbone unfrozen half-way, a longer sequence length from then on), not state that
    grows with steps; a leak rises quarter after quarter. Timing noise of a few % a quarter
    leaves a real jump at >= 90% (unfreezing at step 150 of 300: 1.90, 1.86, 3.12, 3.08 ms)."""
    rise = medians[-1] - medians[0]
    steps = [b - a for a, b in zip(medians, medians[1:], strict=False)]
    return rise > 0 and max(steps) >= 0.85 * rise


STOPPED = 0.1
"""Of a series' rise from its first eighth to its last (after the warm-up), the most its last
three eighths may stand apart (highest less lowest) for the rise to have stopped. State that
grows with steps (a retained graph, a list of tensors) rises on to the end: by 2/7 of the rise
over those eighths where it grows steadily. A memory bank or replay buffer that fills up to its
size rises until it is full, then stays flat (cross-batch memory of 12,800 entries, full at
step 200 of 300: step-time eighths 1.1, 1.2, 5.7, 17.6, 22.5, 16.8, 17.1, 17.4 ms, 4% of the
rise over the last three; a replay buffer full at step 100 of 300: RSS 416 -> 475 MB, 5%).
All three are compared, not the last with the sixth alone: a memory bank never capped, 120
steps of 1-16 ms on 2 threads, read 1.27, 1.97, 3.01, 3.72, 4.34, 7.21, 6.92, 7.71 ms (the
sixth eighth high by chance, 8% of the rise below the last), and another of 240 steps fell
from ~15 to ~7 ms over its last sixth with the bank still growing: neither filled up."""


def stopped(values: Sequence[float], warmup: int) -> bool:
    """The rise of ``values`` after ``warmup`` stopped a quarter of the run or more before its
    end (``STOPPED``), and did not stop before and start again: a leak of a copy each epoch
    grows in steps (RSS eighths 462, 462, 464, 503, 503, 535, 535, 535 MB over three epochs),
    flat between its jumps, while a buffer that fills does not rise again once flat. False
    where an eighth has under 5 finite values."""
    rest = _array(values)[warmup:]
    q = len(rest) // 8
    eighths = [part[np.isfinite(part)] for part in (rest[i * q : (i + 1) * q] for i in range(8))]
    if q == 0 or min(len(part) for part in eighths) < 5:
        return False
    e = [float(np.median(part)) for part in eighths]
    rise = e[7] - e[0]
    if rise <= 0 or max(e[5:]) - min(e[5:]) >= STOPPED * rise:
        return False
    moves = [b - a for a, b in zip(e, e[1:], strict=False)]
    for i, move in enumerate(moves):  # flat between a rise before it and one after it
        if abs(move) < STOPPED / 2 * rise and max(moves[:i], default=0.0) >= 0.2 * rise:
            if max(moves[i + 1 :], default=0.0) >= 0.2 * rise:
                return False
    return True


def stopped_note(what: str) -> str:
    return (
        f", then stopped {what} a quarter of the run or more before its end: state that grows to "
        "a fixed size (a memory bank, a replay buffer, a cache filling up) does so by design, "
        "while a leak grows to the end"
    )


def as_stopped(found: Finding, what: str) -> Finding:
    """``found`` (``step-time-regression`` or ``memory-growth``), whose series ``stopped``,
    said as information; ``what`` stopped ("getting slower", "rising")."""
    found.severity, found.evidence["stopped"] = "info", True
    found.message = found.message.replace("keeps rising:", "rose") + stopped_note(what)
    return found


def warmup_of(n: int) -> int:
    return max(5, n // 20)


WAIT_RISE = 0.03
"""A rise of the share of step time spent waiting for a CPU (first quarter to last) above which
other processes, not the script, may have slowed the steps: see ``step_time_regression``. Runs
on a quiet machine read 0.00 in every quarter; from there a rise of 0.03 stretches a
single-threaded step by 1/0.97. With several threads the stretch is not bounded by the share:
a 2-thread GRU on 2 busy cores, as more busy processes arrived, got 8-95x slower where the
thread's own waiting explains 1.5-4.4x (OpenMP threads spinning for a preempted sibling), so
any rise beyond a quiet machine's readings is taken as other processes' doing."""


def share(part: Sequence[float], whole: Sequence[float], least: int) -> tuple[float, int] | None:
    """The sum of ``part`` over the sum of ``whole`` on the steps where both are finite (a share
    of time, which a few long steps weigh as much as many short ones add up to), and how many
    such steps there are; None under ``least`` of them."""
    a, b = _array(part), _array(whole)
    if len(a) != len(b):
        raise ValueError(f"share of {len(a)} values in {len(b)}")
    both = np.isfinite(a + b)
    count, total = int(both.sum()), float(b[both].sum())
    if count < least or total <= 0:
        return None
    return float(a[both].sum()) / total, count


def _array(values: Sequence[float]) -> np.ndarray:
    """``values`` (a list, an ``array("d")``, a slice of either) as a float64 array: the
    monitor's series without a copy, so a pass over a long run's series costs C loops."""
    return np.asarray(values, dtype=np.float64)


def wait_rose(then: float, now: float) -> bool:
    """The share of step time spent waiting for a CPU rose from ``then`` to ``now`` by
    ``WAIT_RISE`` or more and by a third of its level: other processes arrived. (The share
    wanders with its level, +-0.16 between quarters at ~0.75 on a saturated host with no
    process arriving, exactly 0 on a quiet one: a third of it must come on top.)"""
    return now - then >= max(WAIT_RISE, then / 3)


def quarter_shares(
    part: Sequence[float], whole: Sequence[float], warmup: int
) -> list[float] | None:
    """``share`` of ``part`` in ``whole`` for each quarter of the steps after ``warmup``
    (sampled as ``quarter_medians`` does). None where a quarter has under 5 steps with both
    finite or all of them under 40."""
    rest_part, rest_whole = part[warmup:], whole[warmup:]
    q = len(rest_whole) // 4
    k = (q // 1024) | 1
    shares, seen = [], 0
    for i in range(4):
        span = slice(i * q, (i + 1) * q, k)
        found = share(rest_part[span], rest_whole[span], 5)
        if found is None:
            return None
        shares.append(found[0])
        seen += found[1]
    return shares if seen >= 40 else None


def step_time_regression(
    step_times: Sequence[float],
    cpu_times: Sequence[float] | None = None,
    canary: Sequence[float] | None = None,
    cpu_wait: Sequence[float] | None = None,
    work: Sequence[float] | None = None,
    one_thread: bool = False,
) -> Finding | None:
    """Steps that get slower: quarter medians rise monotonically and the last is >= 1.5x the first.

    ``cpu_times``: the process's CPU seconds per step, given when the work is on the CPU. Then
    the CPU time must grow too (by >= 1.3x): a leak makes each step do more work, while other
    jobs arriving on a shared machine stretch wall time only.
    ``canary``: seconds of a fixed reference workload after each step (NaN where not timed).
    Step times are first divided by how much slower than in the first quarter the machine ran,
    so a host that got slower is not taken for a script that did. Only slowing counts: a
    reference that happened to read fast late in the run must not make a finding.
    ``cpu_wait``: seconds of each step that the thread running it spent runnable but waiting
    for a CPU (the kernel's run-queue delay; NaN where not read). Where the share of step time
    spent so rose by ``WAIT_RISE`` or more, and by a third of its first quarter's level, other
    processes took CPU time the script had before, and no finding is made: with several threads a step can slow down far more than its own
    wait (OpenMP threads spin at each barrier for a sibling that was preempted, so CPU time
    grows too), and a ~10 us reference workload is rarely preempted at all. More work per step
    leaves the share as it was: the scheduler's fair share does not depend on step length (a
    share of summed time, not a median of per-step shares: a short step is either preempted
    or not, so the median would rise as steps got longer). Otherwise the step times are judged
    less that wait (``less_wait``): on a host loaded throughout, more processes arriving move
    the share by less than a third of its level while the quarter medians of 1 ms steps jump
    with the count of steps preempted.
    ``one_thread``: the step ran on one torch thread. No thread of it then spins for a
    preempted sibling, so the time it ran is its own work however many processes arrive: a
    rise of the share is no veto, the steps are judged less their waits, and the machine's
    speed is read from the reference's fastest tenth in each quarter (a thread that waits
    most of the time is switched away and back around the ~20 us workload, whose median then
    reads up to 3.3x slower). Seen with the memory-bank bug as five processes arrived on 2
    cores: the steps' own time 2.3 -> 10.4 ms while the share rose 0.16 -> 0.78 and vetoed
    the finding at every check.
    ``work``: autograd nodes each step made (NaN where not read). Step times (and CPU times)
    are first divided by how much more work the steps did than in the first quarter: an
    episode of a policy-gradient loop that gets longer as the policy learns runs more forwards
    per step, and takes longer, with nothing wrong. Only growth counts, as with ``canary``. A
    retained graph or a growing tensor makes each step slower at the same number of nodes.
    The fastest tenth of the steps must slow too, by at least the square root of the medians'
    rise: state that grows makes every step slower, the fastest with the rest (two sparse
    embeddings never zeroed: fastest tenths 11.9 -> 137 ms and 7.4 -> 49 ms, medians 6.2x and
    5.0x), while other processes leave some steps about as fast as before however much they
    slow the rest (a clean 2-thread step with the test suite arriving beside it: medians less
    waits 1.41 -> 9.77 ms, CPU time up alike from OpenMP threads spinning for a preempted
    sibling, its thread's share of waiting 0.43 -> 0.48; fastest tenth 0.84 -> 1.16 ms).
    """
    warmup = warmup_of(len(step_times))
    waited, times = None, step_times
    if cpu_wait is not None and len(cpu_wait) == len(step_times):
        waited = quarter_shares(cpu_wait, step_times, warmup)
        if waited is not None and wait_rose(waited[0], waited[3]) and not one_thread:
            return None
        if waited is not None:
            times = less_wait(step_times, cpu_wait)
    quarters = _sorted_quarters(times, warmup)  # (sorted once: their medians, fastest tenths)
    if quarters is None:
        return None
    m = [statistics.median(part) for part in quarters]
    lows = [part[(len(part) - 1) // 10] for part in quarters]
    if m[0] <= 0:
        return None
    more = work_growth(work, warmup) if work is not None else None
    # One thread judged by the time it ran: the machine's speed by the same measure.
    ran = one_thread and waited is not None
    speed = (
        (quarter_lows if ran else quarter_medians)(canary, warmup) if canary is not None else None
    )
    for scale in (
        [max(1.0, k / speed[0]) for k in speed] if speed is not None and speed[0] > 0 else None,
        more,
    ):
        if scale is not None:
            m = [v / k for v, k in zip(m, scale, strict=True)]
            lows = [v / k for v, k in zip(lows, scale, strict=True)]
    if not rising(m, 0.9) or m[3] < 1.5 * m[0] or m[2] < 1.2 * m[0] or one_jump(m):
        return None
    if lows[0] > 0 and lows[3] / lows[0] < math.sqrt(m[3] / m[0]):
        return None
    if cpu_times is not None:
        c = quarter_medians(cpu_times, warmup_of(len(cpu_times)))
        if c is not None and more is not None:
            c = [v / k for v, k in zip(c, more, strict=True)]
        if c is not None and c[0] > 0 and c[3] < 1.3 * c[0]:
            return None
    ratio = m[3] / m[0]
    evidence: dict[str, Any] = {
        "quarter_median_ms": [round(v * 1e3, 3) for v in m],
        "quarter_fastest_tenth_ms": [round(v * 1e3, 3) for v in lows],
        "ratio": round(ratio, 2),
        "stopped": stopped(times, warmup),
    }
    if speed is not None:
        evidence["machine_slowdown"] = round(speed[3] / speed[0], 2)
    if waited is not None:
        evidence["cpu_wait_share"] = [round(waited[0], 3), round(waited[3], 3)]
    at = ["machine speed"] * (speed is not None)
    if more is not None and more[3] > 1.0:
        evidence["work_growth"] = [round(k, 2) for k in more]
        at.append("work per step")
    found = Finding(
        "step-time-regression",
        "error" if ratio >= 3 else "warning",
        f"steps got {ratio:.1f}x slower over the run ({m[0] * 1e3:.2f} ms -> {m[3] * 1e3:.2f} ms median"
        + (", less waits for a CPU" if waited is not None else "")
        + (f", at the first quarter's {' and '.join(at)})" if at else ")"),
        evidence=evidence,
    )
    return as_stopped(found, "getting slower") if evidence["stopped"] else found


SUBNORMAL_SHARE = 1e-3
"""Of the weights' values, the share that are subnormal floats before they are named as the
cause of a slowdown on the CPU (a few left by chance cost nothing)."""


def subnormal_cause(found: Finding, named: Iterable[tuple[str, torch.Tensor]]) -> Finding:
    """``found`` (``step-time-regression`` of a CPU run) naming the cause where a share of the
    weights (``named``: (name, parameter)) are subnormal floats, below the dtype's smallest
    normal value and not zero: the CPU computes with them many times slower (a microcode
    assist an operation). Weights that get no gradient, shrunk step by step by weight decay,
    end there (a Child-Sum Tree-LSTM's forget-gate input weights on constituency trees, whose
    inner nodes have no word: 1.7x slower over one SST epoch). One pass over the weights."""
    counts, total = [], 0
    for name, p in named:
        if p.is_floating_point() and p.device.type == "cpu":
            weights = p.detach()
            tiny = torch.finfo(weights.dtype).tiny
            n = int(torch.count_nonzero((weights.abs() < tiny) & (weights != 0)))
            total += weights.numel()
            if n:
                counts.append((n, weights.numel(), name))
    below = sum(n for n, _, _ in counts)
    if below < 64 or below < SUBNORMAL_SHARE * total:
        return found
    counts.sort(reverse=True)
    most = ", ".join(f"{name} {n:,} of {size:,}" for n, size, name in counts[:3])
    if found.evidence.get("stopped"):  # the weights' cost, whether or not it grew to the end
        found.message = found.message.removesuffix(stopped_note("getting slower"))
        found.severity = "error" if found.evidence["ratio"] >= 3 else "warning"
    found.message += (
        f": {below:,} weights are subnormal floats ({most}), which the CPU computes many times "
        "slower than normal ones (weights that get no gradient, shrunk by weight decay?)"
    )
    found.evidence["subnormal_weights"] = below
    found.evidence["subnormal_parameters"] = {name: n for n, _, name in counts[:20]}
    found.fix = (
        "call torch.set_flush_denormal(True) before training on the CPU (subnormal values then "
        "read as zero), or leave the weights that get no gradient out of weight decay"
    )
    return found


def less_wait(step_times: Sequence[float], cpu_wait: Sequence[float]) -> list[float]:
    """Each step's time less what its thread spent waiting for a CPU (NaN where the wait was
    not read): the time the step ran. A 1 ms step on a loaded host either runs through or is
    preempted for a slice of each busy process (3-10 ms), so the median of a quarter's step
    times jumps when a little more than half of its steps were preempted, with no change in
    the share of time spent waiting."""
    t, w = _array(step_times), _array(cpu_wait)
    if len(t) != len(w):
        raise ValueError(f"{len(w)} waits for {len(t)} steps")
    with np.errstate(invalid="ignore"):
        ran = np.where(np.isfinite(w), t - np.minimum(w, t), math.nan)
    return list(ran.tolist())


def most_growth(*measures: Sequence[float]) -> list[float]:
    """One series of a step's work from several measures of it (autograd nodes a step, the
    elements given to the model): each step's largest, each measure taken relative to its own
    median over the early steps (5 to 25, or to the first quarter); NaN where none was read. A
    batch-size warm-up grows the elements at the same nodes, a longer episode the nodes.

    A measure read on some steps only (the nodes, on every 4th step after the 200th) holds its
    last reading in between: else the other's flat readings filled three steps in four, and a
    model grown block by block (nodes 14 -> 35 a step, 1.8x slower) was taken to do the same
    work."""
    n = max((len(m) for m in measures), default=0)
    most = np.full(n, math.nan)
    for m in measures:
        values = _held(_array(m))
        early = values[5 : max(25, n // 4)]
        early = early[np.isfinite(early) & (early > 0)]
        if len(values) == n and len(early):
            scaled = values / statistics.median(early.tolist())
            # (the largest finite measure of each step; NaN where none is finite)
            most = np.fmax(most, np.where(np.isfinite(scaled), scaled, math.nan))
    return list(most.tolist())


def _held(values: np.ndarray) -> np.ndarray:
    """``values`` with each NaN after the first reading replaced by the last reading before it."""
    last = np.maximum.accumulate(np.where(np.isfinite(values), np.arange(len(values)), 0))
    return values[last]  # (row 0's value before the first reading: NaN, or that reading)


def work_growth(work: Sequence[float], warmup: int) -> list[float] | None:
    """How many times the first quarter's work each quarter's steps did (quarter medians of
    ``work``, at least 1: fewer nodes a step is no reason to excuse slower steps); None where
    there are too few readings."""
    w = quarter_medians(work, warmup)
    if w is None or w[0] <= 0:
        return None
    return [max(1.0, v / w[0]) for v in w]


def memory_growth(
    megabytes: Sequence[float],
    kind: str,
    floor_mb: float,
    heap: tuple[Sequence[float], Sequence[float]] | None = None,
) -> Finding | None:
    """Memory after the step keeps rising: every quarter median above the one before by at
    least a tenth of the whole rise, and the last above the first by > floor and > 5%. A
    one-time jump (a profiler window, a cache filled once) or an allocator that reaches its
    high-water mark (QANet's length buckets: 898 -> 1074 -> 1465 -> 1465 MB) leaves the later
    quarters flat and is no growth.

    ``heap``: the C heap's MB in use and free after each step (``heap.heap_mb``), aligned with
    ``megabytes``. Where the bytes in use rose by under a quarter of the rise, or by under
    ``floor_mb``, and the free bytes by at least half of it, malloc is keeping freed blocks
    (``heap-retention``, info), not the script keeping tensors. (A mixture of experts routes
    different rows to each expert every step: judged at step 140 of 500, RSS rose 47 MB, the
    bytes in use 12 MB, 26% of it, while the heap filled its holes; flat from step ~200. A leak
    of under ``floor_mb`` in use is found once it has grown past it.)"""
    m = quarter_medians(megabytes, warmup_of(len(megabytes)))
    if m is None:
        return None
    growth = m[3] - m[0]
    if growth < max(floor_mb, 0.05 * m[0]):
        return None
    if not all(b - a >= 0.1 * growth for a, b in zip(m, m[1:], strict=False)):
        return None
    evidence: dict[str, Any] = {
        "kind": kind,
        "quarter_median_mb": [round(v, 1) for v in m],
        "growth_mb": round(growth, 1),
    }
    used, free = (quarter_medians(s, warmup_of(len(s))) for s in heap) if heap else (None, None)
    if used is not None and free is not None:
        evidence["heap_in_use_mb"] = [round(v, 1) for v in used]
        evidence["heap_free_mb"] = [round(v, 1) for v in free]
        kept = used[3] - used[0] < max(0.25 * growth, floor_mb)
        if kept and free[3] - free[0] >= 0.5 * growth:
            return Finding(
                "heap-retention",
                "info",
                f"{kind} rose +{growth:.0f} MB ({m[0]:.0f} -> {m[3]:.0f} MB) while the C heap's "
                f"bytes in use stayed at {used[0]:.0f} -> {used[3]:.0f} MB and its free bytes "
                f"rose {free[0]:.0f} -> {free[3]:.0f} MB: malloc keeps freed blocks of varying "
                "sizes, not a leak",
                evidence=evidence,
            )
    evidence["stopped"] = stopped(megabytes, warmup_of(len(megabytes)))
    found = Finding(
        "memory-growth",
        "warning",
        f"{kind} after each step keeps rising: +{growth:.0f} MB over the run ({m[0]:.0f} -> {m[3]:.0f} MB)",
        evidence=evidence,
    )
    return as_stopped(found, "rising") if evidence["stopped"] else found


def input_bound(
    data_times: Sequence[float], step_times: Sequence[float], workers: int = 0
) -> Finding | None:
    """Waiting for data takes at least half of each step (median over the last 200 steps).

    ``workers``: the most worker processes a DataLoader of the run had: then "use workers" is
    no advice; the samples themselves are too slow to produce."""
    data, compute = list(data_times[-200:]), list(step_times[-200:])
    if len(data) < 20:
        return None
    wait, busy = statistics.median(data), statistics.median(compute)
    share = wait / max(wait + busy, 1e-12)
    if share < 0.5:
        return None
    return Finding(
        "input-bound",
        "warning",
        f"{share:.0%} of each step is spent waiting for data ({wait * 1e3:.2f} ms data vs {busy * 1e3:.2f} ms compute)",
        evidence={
            "data_ms": round(wait * 1e3, 3),
            "compute_ms": round(busy * 1e3, 3),
            "share": round(share, 3),
            "dataloader_workers": workers,
        },
        fix=(
            f"the DataLoader already has {workers} worker{'s' if workers != 1 else ''}: make each sample cheaper (cache "
            "or precompute preprocessing), or add workers while CPU cores are idle"
            if workers
            else ""
        ),
    )


def device_idle(busy: float, kernels: float, step_times: Sequence[float]) -> Finding | None:
    """The GPU ran kernels for under half of each step: the host, issuing them, sets the pace.

    ``busy`` and ``kernels``: seconds of GPU activity (the union of its kernels' and copies'
    intervals) and their number, per step of a profiler window; ``step_times``: recent steps
    outside windows (the profiler slows the host, so the window's own steps would overstate
    the idle share). On an H200, QANet at batch 32 ran 37 ms of kernels in a 123 ms step; at
    batch 128, 128 ms in 142 ms."""
    times = [t for t in step_times[-50:] if math.isfinite(t) and t > 0]
    if len(times) < 5 or busy <= 0:
        return None
    step = statistics.median(times)
    share = min(busy / step, 1.0)
    if share >= 0.5:
        return None
    return Finding(
        "device-idle",
        "info",
        f"the GPU was busy {share:.0%} of each step ({busy * 1e3:.1f} ms of kernels in a "
        f"{step * 1e3:.1f} ms step, {kernels:.0f} launches): the host's launches set the pace",
        evidence={
            "busy_ms_per_step": round(busy * 1e3, 3),
            "step_ms": round(step * 1e3, 3),
            "share": round(share, 3),
            "kernels_per_step": round(kernels, 1),
        },
    )
