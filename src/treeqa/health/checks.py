"""The run-wide checks that make findings (``findings.py``) from numbers the monitor collected: step time, memory, data wait, the first loss, parameter aliases, hot
operators, activations, non-finite gradients.

Everything here is a plain function over series, module trees or tensors, so each check can be
tested on its own; ``monitor.py`` decides when to call them. The checks on what goes into a
loss are in ``loss_inputs.py``, those on the slips of hand-written loops in ``slips.py``.
"""

from __future__ import annotations

import inspect
import math
import re
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from treeqa.health.findings import Finding
from treeqa.health.thinning import row

# ---------------------------------------------------------------- source locations

TORCH_DIR = str(Path(torch.__file__).parent)
_SKIP = (
    TORCH_DIR,
    str(Path(__file__).parent),
    "<frozen",
    "runpy.py",
)
_SKIP_PACKAGES = (
    "lightning",
    "pytorch_lightning",
    "lightning_utilities",
    "transformers",
    "accelerate",
)
"""Frameworks that call the user's training step: their frames are not where a bug is."""


def _framework(filename: str) -> bool:
    parts = Path(filename).parts
    return any(p in parts for p in _SKIP_PACKAGES) or "runpy" in filename


def user_site(depth: int = 1) -> str:
    """``file:line`` of the innermost caller outside torch, this package and runpy."""
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_SKIP) and not _framework(name):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return ""


def definition_file(cls: type) -> str:
    """The file a class is defined in; "" when unknown. (Its line would parse the file: a
    script that makes a new optimiser, and so watches its models again, every few steps paid
    ~50 ms each time.)"""
    try:
        return inspect.getsourcefile(cls) or ""
    except TypeError:  # a builtin class
        return ""


def definition_site(obj: Any) -> str:
    """``file:line`` where a class (or a module's class) is defined; "" when unknown."""
    cls = obj if isinstance(obj, type) else type(obj)
    try:
        return f"{inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return ""


def assignment_site(files: Iterable[str], attr: str, attribute: bool = False) -> str:
    """Where a holder gets its value: the first ``.attr = ...`` (or ``attr +=``, or
    ``attr[key] = ...``) line in
    ``files``, or rather the first that also reads it (``total += loss``, ``state = 0.5 *
    state + h``): that is where a graph grows, not where the holder starts empty.

    ``attribute``: only ``obj.attr = ...`` counts (a local ``attr = ...`` is another variable).
    """
    # A statement that starts with the target (``x.attr = ...``), not prose that mentions it.
    prefix = "+" if attribute else "*"
    # ``attr[key] = ...`` too: a dict of tensors kept by hand (an EMA table).
    pattern = re.compile(
        rf"^\s*([\w\[\]]+\.){prefix}{re.escape(attr)}(?:\[[^\]]*\])?\s*(=(?!=)|\+=)"
    )
    first = ""
    for name in files:
        try:
            lines = Path(name).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for i, line in enumerate(lines, 1):
            code = line.split("#")[0]
            target = pattern.search(code)
            if target is None or re.search(r"=\s*None\s*$", code):
                continue
            value = code[target.start(2) :]  # "= ..." or "+= ..."
            if value.startswith("+=") or re.search(rf"\b{re.escape(attr)}\b", value):
                return f"{name}:{i}"
            first = first or f"{name}:{i}"
    return first


# ---------------------------------------------------------------- series


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
    pairs = [(a, b) for a, b in zip(part, whole, strict=True) if math.isfinite(a + b)]
    total = sum(b for _, b in pairs)
    if len(pairs) < least or total <= 0:
        return None
    return sum(a for a, _ in pairs) / total, len(pairs)


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
    """
    warmup = warmup_of(len(step_times))
    waited, times = None, step_times
    if cpu_wait is not None and len(cpu_wait) == len(step_times):
        waited = quarter_shares(cpu_wait, step_times, warmup)
        if waited is not None and wait_rose(waited[0], waited[3]) and not one_thread:
            return None
        if waited is not None:
            times = less_wait(step_times, cpu_wait)
    m = quarter_medians(times, warmup)
    if m is None or m[0] <= 0:
        return None
    more = work_growth(work, warmup) if work is not None else None
    # One thread judged by the time it ran: the machine's speed by the same measure.
    ran = one_thread and waited is not None
    speed = (
        (quarter_lows if ran else quarter_medians)(canary, warmup) if canary is not None else None
    )
    if speed is not None and speed[0] > 0:
        m = [v / max(1.0, k / speed[0]) for v, k in zip(m, speed, strict=True)]
    if more is not None:
        m = [v / k for v, k in zip(m, more, strict=True)]
    if not rising(m, 0.9) or m[3] < 1.5 * m[0] or m[2] < 1.2 * m[0] or one_jump(m):
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
        "ratio": round(ratio, 2),
    }
    if speed is not None:
        evidence["machine_slowdown"] = round(speed[3] / speed[0], 2)
    if waited is not None:
        evidence["cpu_wait_share"] = [round(waited[0], 3), round(waited[3], 3)]
    at = ["machine speed"] * (speed is not None)
    if more is not None and more[3] > 1.0:
        evidence["work_growth"] = [round(k, 2) for k in more]
        at.append("work per step")
    return Finding(
        "step-time-regression",
        "error" if ratio >= 3 else "warning",
        f"steps got {ratio:.1f}x slower over the run ({m[0] * 1e3:.2f} ms -> {m[3] * 1e3:.2f} ms median"
        + (", less waits for a CPU" if waited is not None else "")
        + (f", at the first quarter's {' and '.join(at)})" if at else ")"),
        evidence=evidence,
    )


def less_wait(step_times: Sequence[float], cpu_wait: Sequence[float]) -> list[float]:
    """Each step's time less what its thread spent waiting for a CPU (NaN where the wait was
    not read): the time the step ran. A 1 ms step on a loaded host either runs through or is
    preempted for a slice of each busy process (3-10 ms), so the median of a quarter's step
    times jumps when a little more than half of its steps were preempted, with no change in
    the share of time spent waiting."""
    return [
        t - min(w, t) if math.isfinite(w) else math.nan
        for t, w in zip(step_times, cpu_wait, strict=True)
    ]


def most_growth(*measures: Sequence[float]) -> list[float]:
    """One series of a step's work from several measures of it (autograd nodes a step, the
    elements given to the model): each step's largest, each measure taken relative to its own
    median over the early steps (5 to 25, or to the first quarter); NaN where none was read. A
    batch-size warm-up grows the elements at the same nodes, a longer episode the nodes."""
    n = max((len(m) for m in measures), default=0)
    scaled = []
    for m in measures:
        early = [v for v in m[5 : max(25, n // 4)] if math.isfinite(v) and v > 0]
        if len(m) == n and early:
            scale = statistics.median(early)
            scaled.append([v / scale for v in m])
    return (
        [
            max((v for v in values if math.isfinite(v)), default=math.nan)
            for values in zip(*scaled, strict=True)
        ]
        if scaled
        else [math.nan] * n
    )


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
    ``megabytes``. Where the bytes in use rose by under a quarter of the rise and the free
    bytes by at least half of it, malloc is keeping freed blocks (``heap-retention``, info),
    not the script keeping tensors."""
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
        if used[3] - used[0] < 0.25 * growth and free[3] - free[0] >= 0.5 * growth:
            return Finding(
                "heap-retention",
                "info",
                f"{kind} rose +{growth:.0f} MB ({m[0]:.0f} -> {m[3]:.0f} MB) while the C heap's "
                f"bytes in use stayed at {used[0]:.0f} -> {used[3]:.0f} MB and its free bytes "
                f"rose {free[0]:.0f} -> {free[3]:.0f} MB: malloc keeps freed blocks of varying "
                "sizes, not a leak",
                evidence=evidence,
            )
    return Finding(
        "memory-growth",
        "warning",
        f"{kind} after each step keeps rising: +{growth:.0f} MB over the run ({m[0]:.0f} -> {m[3]:.0f} MB)",
        evidence=evidence,
    )


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


def loss_at_init(first_loss: float, num_classes: int) -> Finding | None:
    """The first cross-entropy is far above log(C): the output layer starts too confident."""
    expected = math.log(max(num_classes, 2))
    if not math.isfinite(first_loss) or first_loss <= expected + max(1.0, expected):
        return None
    return Finding(
        "loss-at-init",
        "warning",
        f"first loss {first_loss:.3f} is far above log({num_classes}) = {expected:.3f} expected at initialisation",
        evidence={
            "first_loss": round(first_loss, 4),
            "expected": round(expected, 4),
            "classes": num_classes,
        },
    )


CHANCE_STEPS, CHANCE_SAMPLES, CHANCE_BAND, CHANCE_FLOOR = 200, 4, 0.03, 0.9
"""``loss-at-chance``: a run of at least this many steps; this many sampled steps in its second
half whose loss is a mean cross-entropy, their median within this fraction of log(C); and no
sampled step's below this share of log(C)."""
CHANCE_ABOVE = 0.10
"""Where the classes are imbalanced, the median may stand this far above the level of
predictions at the labels' frequencies: a model that learnt only those chases each batch's mix
(3-6% above it in ``bug_loss_at_chance_imbalanced.py``), and a loss above it learns no more."""


def sampled_cross_entropies(
    samples: Sequence[tuple[int, int, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    levels: Mapping[int, float] | None = None,
) -> list[tuple[int, int, float, float]]:
    """(step, C, loss, loss / chance) of the sampled steps whose loss is a mean cross-entropy
    over C classes (``samples``: step, C, the factor the step's loss is it times: 1/k under
    gradient accumulation over k), read from the run's series; chance is log(C), or the
    step's level in ``levels`` (imbalanced classes: ``loss_at_chance``)."""
    levels = levels or {}
    return [
        (s, c, value, value / levels.get(s, math.log(c)))
        for s, c, value in sampled_losses(samples, steps, losses)
    ]


def sampled_losses(
    samples: Sequence[tuple[int, Any, float]], steps: Sequence[float], losses: Sequence[float]
) -> list[tuple[int, Any, float]]:
    """(step, what, loss / factor) of each of ``samples`` (step, what, factor) whose step has a
    value in ``losses``, whose step ``steps`` names (a long run's series are thinned:
    ``thinning.py``)."""
    rows = ((s, what, k, row(steps, s)) for s, what, k in samples)
    return [(s, what, losses[at] / k) for s, what, k, at in rows if at is not None]


def typical_late_loss(
    steps: Sequence[float],
    losses: Sequence[float],
    middle: float,
    samples: Sequence[tuple[int, Any, float]] = (),
) -> float:
    """The median finite loss of every step in the run's second half, sampled or not (NaN
    when none): the sampled steps are every ``every``-th, and a loader read in the same order
    each epoch of as many batches puts the same batch on each of them, so their level alone
    may be one batch's. Divided by the median factor of the sampled steps there (``samples``:
    step, what, factor): the steps between are read as scaled as those."""
    late = [v for s, v in zip(steps, losses, strict=False) if s > middle and math.isfinite(v)]
    scales = [k for s, _, k in samples if s > middle]
    scale = statistics.median(scales) if scales else 1.0
    return statistics.median(late) / scale if late else math.nan


def loss_at_chance(
    samples: Sequence[tuple[int, int, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    levels: Mapping[int, float] | None = None,
) -> Finding | None:
    """The sampled steps' loss, a mean cross-entropy over C classes (``samples``: step, C,
    factor, as for ``sampled_cross_entropies``), stayed at chance through a run of
    ``CHANCE_STEPS`` or more: the median of its second half within ``CHANCE_BAND`` of it, not
    falling by more than that from the first half of those readings to the second, and none
    ever far below it. The model learns nothing from its inputs. Chance is log(C), the
    loss of predictions that ignore the input over balanced classes, or a step's level in
    ``levels`` where the classes are imbalanced: the loss of a model that learnt only how often
    each class comes, on that step's batch (``priors.py``). ``steps`` and ``losses``: the run's
    series (a batch's loss wanders around log(C): with 64 random labels, by ~3%)."""
    if not steps or steps[-1] < CHANCE_STEPS:
        return None
    read = sampled_cross_entropies(samples, steps, losses, levels)
    middle = (steps[0] + steps[-1]) / 2
    late = [r for s, _, _, r in read if s > middle]
    if len(late) < CHANCE_SAMPLES or not all(r >= CHANCE_FLOOR for *_, r in read):  # (NaN too)
        return None
    imbalanced = [value / r for s, _, value, r in read if s > middle and s in (levels or {})]
    above = CHANCE_ABOVE if imbalanced else CHANCE_BAND
    if not -CHANCE_BAND <= statistics.median(late) - 1 <= above:
        return None
    half = len(late) // 2  # still falling onto it (from above): the model learns
    if statistics.median(late[:half]) - statistics.median(late[half:]) > CHANCE_BAND:
        return None
    classes = read[-1][1]
    chance = statistics.median(imbalanced) if imbalanced else math.log(classes)
    # Every step's loss, not only the sampled ones', at chance too (not below the floor).
    if not typical_late_loss(steps, losses, middle, samples) >= CHANCE_FLOOR * chance:
        return None
    values = [value for _, _, value, _ in read]
    against = f"log({classes}) = {chance:.3f} for predictions that ignore the input"
    if imbalanced:
        against = (
            f"{chance:.3f} (their median) for predictions that ignore the input and give each "
            f"class as often as the labels do (imbalanced classes; log({classes}) = "
            f"{math.log(classes):.3f})"
        )
    return Finding(
        "loss-at-chance",
        "warning",
        f"the loss stayed at chance level all run: cross-entropy over {classes} classes read "
        f"{min(values):.3f}-{max(values):.3f} on {len(read)} sampled steps from step "
        f"{read[0][0]} to {read[-1][0]}, against {against}: the model learns nothing from its "
        "inputs",
        evidence={
            "classes": classes,
            "expected": round(chance, 4),
            "imbalanced": bool(imbalanced),
            "sampled_steps": len(read),
            "min": round(min(values), 4),
            "max": round(max(values), 4),
        },
    )


DIVERGED_RATIO, DIVERGED_FLOOR, DIVERGED_SAMPLES = 4.0, 2.0, 2
"""Sampled mean cross-entropies late in the run (at least ``DIVERGED_SAMPLES`` of them) this
many times log(C) in their median, after one at or below half of the median earlier, and every
step's loss there, sampled or not, ``DIVERGED_FLOOR`` times it in its median: the loss rose far
above that of predictions that ignore the input. Not every reading that high: a diverged model
thrashes, and a batch it happens to get right reads near 0 among readings of hundreds."""


def loss_diverged(
    samples: Sequence[tuple[int, int, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    maximize: str = "",
) -> Finding | None:
    """The sampled steps' loss, a mean cross-entropy over C classes (``samples``: step, C,
    factor, as for ``sampled_cross_entropies``), read ``DIVERGED_RATIO`` x log(C) or more in
    the median of the run's second half (``DIVERGED_SAMPLES`` readings or more; every step's
    there ``DIVERGED_FLOOR`` x log(C) in their median), all finite, after a reading at or below
    half that earlier: the model went from guessing to
    confidently wrong, as a learning rate far too high makes it while the values stay finite
    (an infinite loss is ``non-finite``'s). A model that starts far above log(C) is
    ``loss-at-init``'s and is not this. ``maximize``: the optimiser that steps (its class
    name) has ``maximize=True`` set, so it climbs the loss: that is the cause said, not the
    learning rate."""
    if not steps:
        return None
    read = sampled_cross_entropies(samples, steps, losses)
    if not all(math.isfinite(v) for _, _, v, _ in read):
        return None
    middle = (steps[0] + steps[-1]) / 2
    late = [r for s, _, _, r in read if s > middle]
    early = [r for s, _, _, r in read if s <= middle]
    if len(late) < DIVERGED_SAMPLES or not early:
        return None
    level = statistics.median(late)
    if level < DIVERGED_RATIO or min(early) > level / 2:
        return None
    classes = read[-1][1]
    # Every step's loss, not only the sampled ones', high too: one batch read on each sampled
    # step (a loader in a fixed order, as many batches an epoch as the sampling interval)
    # may be one the model legitimately gets wrong while it fits the others.
    if not typical_late_loss(steps, losses, middle, samples) >= DIVERGED_FLOOR * math.log(classes):
        return None
    low = min(value for s, _, value, _ in read if s <= middle)
    late_values = [value for s, _, value, _ in read if s > middle]
    cause = (
        f"{maximize} has maximize=True set, so each step climbs the loss it is given"
        if maximize
        else "a learning rate far too high?"
    )
    evidence: dict[str, Any] = {
        "classes": classes,
        "chance": round(math.log(classes), 4),
        "early_min": round(low, 4),
        "late_min": round(min(late_values), 4),
        "sampled_steps": len(read),
    }
    if maximize:
        evidence["maximize"] = maximize
    return Finding(
        "loss-diverged",
        "warning",
        f"the loss diverged: cross-entropy over {classes} classes read {low:.3f} early, then "
        f"{min(late_values):.3f}-{max(late_values):.3f} over the second half of the run (a "
        f"median {level:.1f}x log({classes}) = {math.log(classes):.3f}, the loss of predictions "
        f"that ignore the input): the model is confidently wrong ({cause})",
        evidence=evidence,
        fix=MAXIMIZE_FIX if maximize else "",
    )


def loss_climbed(
    samples: Sequence[tuple[int, str, float]],
    steps: Sequence[float],
    losses: Sequence[float],
    maximize: str,
) -> Finding | None:
    """The sampled steps' loss, itself a regression loss (``samples``: step, function, e.g.
    ``mse_loss``), climbed while the optimiser that steps the weights, ``maximize`` (its class
    name), has ``maximize=True``: the median of the run's second half ``DIVERGED_RATIO`` x or
    more the lowest reading of its first half, and every step's loss there ``DIVERGED_FLOOR`` x
    it in its median. A regression loss has no level of its own to read (log(C)
    for a cross-entropy), so only this cause is judged: the optimiser climbs the loss it is
    given. All finite (an overflow is ``non-finite``'s)."""
    if not steps or not maximize:
        return None
    read = sampled_losses(samples, steps, losses)
    if not all(math.isfinite(v) for *_, v in read):
        return None
    middle = (steps[0] + steps[-1]) / 2
    early = [v for s, _, v in read if s <= middle]
    late = [v for s, _, v in read if s > middle]
    if len(late) < DIVERGED_SAMPLES or not early or min(early) <= 0:
        return None
    low, level = min(early), statistics.median(late)
    if level < DIVERGED_RATIO * low:
        return None
    if not typical_late_loss(steps, losses, middle, samples) >= DIVERGED_FLOOR * low:
        return None
    function = read[-1][1]
    return Finding(
        "loss-diverged",
        "warning",
        f"the loss diverged: {function} read {low:.4g} early, then {min(late):.4g}-"
        f"{max(late):.4g} over the second half of the run (a median {level / low:.1f}x its "
        f"early low): {maximize} has maximize=True set, so each step climbs the loss it is "
        "given",
        evidence={
            "function": function,
            "early_min": round(low, 6),
            "late_min": round(min(late), 6),
            "late_median": round(level, 6),
            "sampled_steps": len(read),
            "maximize": maximize,
        },
        fix=MAXIMIZE_FIX,
    )


MAXIMIZE_FIX = (
    "drop maximize=True from the optimiser: it steps up the gradient, raising the loss it is "
    "given (to maximise an objective on purpose, keep it and give it that objective, not a loss)"
)


# ---------------------------------------------------------------- tensors and modules


def untraceable(x: Any) -> bool:
    """Inside ``torch.compile``'s trace, or a tensor of a ``torch.func`` transform (``vmap``,
    ``grad``: per-sample gradients): values there cannot be read on the host (vmap raises on
    ``.item()``), and a hook must not touch them."""
    return torch.compiler.is_compiling() or (
        isinstance(x, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(x)
    )


def dense(x: Any) -> bool:
    """A tensor with a strided layout, as most are: a sparse one (COO, CSR: a graph's
    adjacency a module returns), a nested one or an MKL-DNN one has no mean, ``pow`` or
    ``isfinite``, and a hook that reads outputs passes it by."""
    return isinstance(x, torch.Tensor) and x.layout == torch.strided and not x.is_nested


def module_names(models: Iterable[nn.Module]) -> dict[int, str]:
    names: dict[int, str] = {}
    for i, model in enumerate(models):
        prefix = "" if i == 0 else f"model{i}."
        for name, module in model.named_modules():
            names.setdefault(id(module), (prefix + name) or type(model).__name__)
    return names


def parameter_aliases(model: nn.Module) -> list[Finding]:
    """Layers or parameters reachable under two names with no declared tie, where that is
    likely a slip: one layer under two attributes of one parent (``self.Ur = self.Uz``,
    ``[block] * n``), or two layers sharing one parameter table (``copy.copy`` of a module).
    One layer given to two components (an embedding shared by encoder and decoder), a handle
    on a sub-layer (``self.last = self.features[-1]``) and a weight assigned to another
    layer (``b.weight = a.weight``) are written on purpose."""
    declared = set(getattr(model, "_tied_weights_keys", None) or ())
    findings: list[Finding] = []
    seen: dict[int, str] = {}
    owners: dict[str, nn.Module] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        owners[name] = module
        if not any(True for _ in module.parameters(recurse=False)) and not list(module.children()):
            continue
        first = seen.setdefault(id(module), name)
        if first != name and name.rpartition(".")[0] == first.rpartition(".")[0]:
            if (
                any(n in declared or n.startswith(tuple(declared)) for n in (name, first))
                and declared
            ):
                continue
            parent_name, _, attr = name.rpartition(".")
            parent = owners.get(parent_name, model)
            where = assignment_site([inspect.getsourcefile(type(parent)) or ""], attr)
            findings.append(
                Finding(
                    "parameter-alias",
                    "warning",
                    f"{name} and {first} are the same {type(module).__name__}: they share every parameter",
                    where=where or definition_site(parent),
                    evidence={
                        "names": [first, name],
                        "parameters": sum(p.numel() for p in module.parameters()),
                    },
                )
            )
    by_param: dict[int, list[str]] = {}
    sizes: dict[int, int] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_param.setdefault(id(p), []).append(name)
        sizes[id(p)] = p.numel()
    copies: dict[tuple[str, ...], int] = {}  # layers sharing a parameter table -> its size
    for key, names in by_param.items():
        layers = [owners.get(n.rpartition(".")[0], model) for n in names]
        if (
            len(names) < 2
            or any(n in declared for n in names)
            or len({id(m) for m in layers}) < len(layers)  # one layer, two names: judged above
            or len({id(m._parameters) for m in layers}) == len(layers)  # a weight assigned
        ):
            continue
        owner_names = tuple(n.rpartition(".")[0] for n in names)
        copies[owner_names] = copies.get(owner_names, 0) + sizes[key]
    for owner_names, size in copies.items():
        findings.append(
            Finding(
                "parameter-alias",
                "warning",
                f"{', '.join(owner_names)} share one parameter table: a shallow copy "
                "(copy.copy) of a layer, meant as a new one?",
                where=definition_site(model),
                evidence={"names": list(owner_names), "parameters": size},
            )
        )
    return findings


_FAMILIES = (
    # FSDP's regions hold its all-gathers and reduce-scatters ("FSDP::all_gather" is no indexing).
    (
        "communication",
        re.compile(r"c10d::|nccl|gloo|DistributedDataParallel|FSDP::|FullyShardedDataParallel"),
    ),
    ("convolution", re.compile(r"conv")),
    # Fused RNN layers (aten::mkldnn_rnn_layer on a CPU, _cudnn_rnn, and their backward nodes,
    # CamelCase): before "elementwise", which aten::rnn_tanh would match.
    ("recurrent", re.compile(r"rnn|lstm|gru", re.IGNORECASE)),
    # scaled_dot_product_attention's kernels (flash, memory-efficient, cuDNN, the CPU one) and
    # their backward nodes: before "matmul" and "softmax/loss", whose work they fuse.
    ("attention", re.compile(r"attention", re.IGNORECASE)),
    ("matmul", re.compile(r"::(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|dot|einsum)\b|gemm")),
    ("softmax/loss", re.compile(r"softmax|nll_loss|cross_entropy")),
    # Random draws, dropout's masks above all: before "reduction", which aten::normal_ matched.
    (
        "random",
        re.compile(r"bernoulli|random_|uniform_|normal_|multinomial|randperm|\brandn?\b|dropout"),
    ),
    ("indexing", re.compile(r"index|gather|scatter|embedding|take|masked")),
    ("copy", re.compile(r"copy_|::to\b|_to_copy|contiguous|clone|cat|stack")),
    ("reduction", re.compile(r"sum|mean|max|min|norm|var|std")),
    (
        "elementwise",
        re.compile(r"add|mul|sub|div|tanh|sigmoid|relu|gelu|exp|log|pow|sqrt|where|fill|zero"),
    ),
)


# The usual cheaper rewrite for each family that can dominate a step (hot-op's fix).
_IMAGE_CONV_FIX = (
    "convolutions dominating is how a CNN without a text embedding looks; on a GPU, bf16 "
    "autocast and channels_last memory format make them cheaper"
)
_INDEX_PUT_FIX = (
    "rows gathered as x[idx] are scattered back in the backward by an accumulating index_put_, "
    "slow on a CPU: x.index_select(0, idx), whose backward is index_add_, ran forward and "
    "backward 1.8x faster (20,000 rows of 64; a graph network's step 1.75-2.2x); or the "
    "index_put_ is an assignment x[idx] = v"
)
_FAMILY_FIXES = {
    "convolution": "replace a dense conv (e.g. a 2-D char CNN) with a depthwise-separable 1-D conv; "
    "bf16 on a GPU",
    "indexing": "look each index up once and reuse it (torch.unique / one gather per batch, index "
    "tensors built outside the step); with small layers this share is expected and falls as "
    "they widen",
    "copy": "keep tensors on their device and in the layout the next op reads; fill one "
    "preallocated tensor instead of cat/stack in a loop",
    "matmul": "dense layers dominating is how a healthy model looks; bf16 autocast or larger "
    "batches make them cheaper",
    "softmax/loss": "a softmax or loss over a large output (a big vocabulary) is expected to cost "
    "this much; an adaptive or sampled softmax cuts it",
    "reduction": "many small reductions: compute them over one stacked tensor, or fuse them with "
    "torch.compile",
    "elementwise": "many small elementwise ops: fuse them (torch.compile, fused optimisers such "
    "as Adam(fused=True)) or give each more work with larger batches",
    "recurrent": "recurrent layers dominating is how an RNN model looks: the time steps run one "
    "after another; larger batches, or cuDNN on a GPU, make each step cheaper",
    "attention": "attention's time grows with the square of the length: batch examples of "
    "similar length (buckets) so padding is not attended, and keep sequences no longer than the "
    "task needs; on a GPU a fused kernel's first call at a new shape can plan or tune for it, "
    "so padding lengths to a multiple of 8 or 16 bounds the shapes",
    "random": "random draws, mostly dropout masks: on a CPU torch draws one Mersenne Twister "
    "number for each element of a mask (a GPU draws them in a fused kernel); lower the dropout "
    "on the largest tensors, attention weights above all (on a CPU, "
    "scaled_dot_product_attention with dropout_p > 0 also leaves its fused kernel for a slower "
    "one), or draw a cheaper mask (one 64-bit draw for four elements)",
    "communication": "the processes wait on each other's gradients: give each more work per "
    "all-reduce (a larger batch per process, or accumulation under no_sync()); on a CPU host, "
    "one process with all the threads may train faster than several",
    "other": "no usual rewrite for these operators; when they are small per-call overhead "
    "(aten::t, transposes, autograd nodes), larger batches make each step do more work",
}


def op_family(name: str) -> str:
    for family, pattern in _FAMILIES:
        if pattern.search(name):
            return family
    return "other"


def hot_op(
    op_times: dict[str, float], steps: int, conv_over_text: bool = True, cpu_wait: float = 0.0
) -> Finding | None:
    """The operator family with the largest share of self time in a profiler window.

    Dense matmuls dominating is how a healthy model looks, so they stay "info"; convolution,
    indexing or copy taking >= 50% and twice the runner-up is a warning (the 2-D character CNN of the QANet report is the example).
    ``op_times`` and ``cpu_wait`` are microseconds over the window's ``steps``; ``cpu_wait``
    is what the step's thread spent waiting for a CPU. Operator times are wall times, so that
    wait is inside one operator or another: a warning must stand with all of it taken from the
    top family (a busy host made ``scatter_add_`` 72% of a trivial model's step).
    """
    total = sum(op_times.values())
    if total <= 0:
        return None
    families: dict[str, float] = {}
    for name, t in op_times.items():
        families[op_family(name)] = families.get(op_family(name), 0.0) + t
    ranked = sorted(families.items(), key=lambda kv: -kv[1])
    family, t = ranked[0]
    share = t / total
    top = sorted(
        (kv for kv in op_times.items() if op_family(kv[0]) == family), key=lambda kv: -kv[1]
    )[:3]
    own = max(0.0, t - cpu_wait)  # the family's time, had all the waiting been in it
    second = ranked[1][1] if len(ranked) > 1 else 0.0
    # At least half the time and twice the runner-up's (as shares of the window without the
    # wait). Below ~2 ms a step, one preempted call can dominate a 3-step window: no warning.
    dominant = own >= total - t and own >= 2 * second and own / 1e3 / max(steps, 1) >= 2.0
    # Only families with a usual cheaper rewrite warn; on a busy CPU any small op can look hot.
    # A conv stack that is already 1-D / depthwise (QANet's encoder) has no cheaper rewrite,
    # and an image CNN's convolutions are its work.
    warn = ("convolution",) * conv_over_text + ("indexing", "copy")
    severity = "warning" if dominant and family in warn else "info"
    fix = _FAMILY_FIXES.get(family, "")
    if family == "convolution" and not conv_over_text:
        fix = _IMAGE_CONV_FIX
    if family == "indexing" and any("index_put" in name for name, _ in top):
        fix = f"{_INDEX_PUT_FIX}; {fix}"
    return Finding(
        "hot-op",
        severity,
        f"{family} operators take {share:.0%} of step time ({', '.join(k for k, _ in top)})",
        fix=fix,
        evidence={
            "family": family,
            "share": round(share, 3),
            "ms_per_step": round(t / 1e3 / max(steps, 1), 3),
            "families": {
                k: round(v / total, 3) for k, v in sorted(families.items(), key=lambda kv: -kv[1])
            },
            "top_ops": {k: round(v / 1e3 / max(steps, 1), 3) for k, v in top},
            "cpu_wait_ms_per_step": round(cpu_wait / 1e3 / max(steps, 1), 3),
        },
    )


def module_kind(module: nn.Module) -> tuple[Any, ...]:
    """What makes two modules of a stack the same block: their class, their own weights' shapes
    and their children's classes (read without walking the subtree). Tensors set on a module
    count as its weights: FSDP's ``FullyShardedDataParallel`` sets views of its flat parameter
    in place of the parameters for a forward. A module with no weights and a single child wraps
    it, and is the kind of what it wraps (each layer of a stack wrapped in
    ``FullyShardedDataParallel``)."""
    weights: list[torch.Tensor] = [*module.parameters(recurse=False)]
    weights += [v for v in vars(module).values() if isinstance(v, torch.Tensor)]
    own = tuple(tuple(w.shape) for w in weights)
    children = list(module.children())
    if not own and len(children) == 1:
        return (type(module), module_kind(children[0]))
    return (type(module), own, tuple(type(c) for c in children))


def activation_growth(
    rms: dict[str, float], kinds: dict[str, tuple[Any, ...]] | None = None
) -> Finding | None:
    """Output RMS that multiplies from block to block across a repeated stack (``blocks.0..k``).

    With ``kinds`` (``module_kind`` by name), only the stack's repeated blocks are compared, the
    most common kind: in ``nn.Sequential(Linear(16, 128), ReLU(), Linear(128, 2))`` nothing
    repeats, and logits larger than the hidden layer's output are no growth."""
    groups: dict[str, list[tuple[int, float, Any]]] = {}
    for name, value in rms.items():
        m = re.fullmatch(r"(.*)\.(\d+)", name)
        if m:
            kind = kinds.get(name) if kinds is not None else None
            groups.setdefault(m.group(1), []).append((int(m.group(2)), value, kind))
    worst: tuple[float, str, list[float]] | None = None
    for prefix, items in groups.items():
        if kinds is not None:
            # The most common kind; of kinds as common, the one with weights: a deep MLP's
            # Linear layers beside its ReLUs, whose outputs follow the layer before them.
            counts = Counter(kind for _, _, kind in items)
            rank = {k: (n, k is not None and bool(k[1] or k[2])) for k, n in counts.items()}
            best = [k for k, r in rank.items() if r == max(rank.values())]
            if len(best) > 1:  # no one kind repeats most
                continue
            items = [i for i in items if i[2] == best[0]]
        values = [v for _, v, _ in sorted(items, key=lambda i: i[0])]
        if len(values) < 3 or min(values) <= 0 or not all(map(math.isfinite, values)):
            continue
        ratios = [b / a for a, b in zip(values, values[1:], strict=False)]
        growth = values[-1] / values[0]
        if (
            sum(r >= 1.5 for r in ratios) >= len(ratios) - 1
            and growth >= 8
            and (worst is None or growth > worst[0])
        ):
            worst = (growth, prefix, values)
    if worst is None:
        return None
    growth, prefix, values = worst
    per_block = growth ** (1 / (len(values) - 1))
    return Finding(
        "activation-growth",
        "error" if growth >= 1e3 else "warning",
        f"output RMS of {prefix}.0..{len(values) - 1} grows {per_block:.1f}x per block ({growth:.3g}x in all)",
        where=prefix,
        evidence={
            "rms": [float(f"{v:.4g}") for v in values],
            "per_block": round(per_block, 2),
            "total": float(f"{growth:.4g}"),
        },
    )


def non_finite_grads(named: Sequence[tuple[str, torch.Tensor]]) -> list[str]:
    """Names of parameters whose gradient holds NaN/Inf (one host sync for the whole model)."""
    grads = [(n, p.grad) for n, p in named if p.grad is not None and p.grad.is_floating_point()]
    if not grads:
        return []
    # Sparse gradients (embedding tables with sparse=True) have no norm kernel: use their values.
    dense = [g.detach().coalesce().values() if g.is_sparse else g.detach() for _, g in grads]
    norms = torch._foreach_norm(dense)
    finite = torch.isfinite(torch.stack([n.float().to(norms[0].device) for n in norms]))
    if bool(finite.all()):
        return []
    return [name for (name, _), ok in zip(grads, finite.tolist(), strict=True) if not ok]


def anomaly_detection_on(step: int) -> Finding:
    """Autograd's anomaly detection was on at two sampled steps, the second ``step``."""
    return Finding(
        "anomaly-detection-on",
        "warning",
        "autograd's anomaly detection is on (torch.autograd.set_detect_anomaly or "
        "detect_anomaly): every forward op records its traceback and every backward op is "
        "checked for NaN, which makes steps slower (2-3x for a small MLP); it is for hunting a "
        "NaN, not for training",
        evidence={"step": step},
    )
