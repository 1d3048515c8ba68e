"""The training-health monitor: cheap checks every step, hooks and scans on sampled steps.

Every step costs a few timer reads and appends to the series (kept to a bounded size by
``thinning.py``) and reads the loss (on a GPU through ``readings.py``, without a per-step host
sync). On CPU, the process's CPU time and a
timed reference workload (``Canary``: the machine's own speed) are read on each of the first
``TIMED_ALL`` steps, then on every ``TIMED_EVERY``-th. Process memory is read every
``RSS_EVERY``-th step or ``RSS_EVERY_S`` seconds, whichever comes first (and with it, at most
every ``HEAP_EVERY_S``, what the C heap holds in use and free: ``heap.py``). Heavier checks run
on sampled steps (the first three and every ``every``-th): module-output RMS, probabilities fed
to cross-entropy, gradient finiteness. The checks over the series run every ``every`` steps, or
every 1/``SERIES_CHECKS`` of the steps so far, whichever is longer. gc walks for graphs kept
since the previous scan (``graphs.py``) run at step 32 (step 8 notes where the first interval
starts), then within a time budget; profiler windows (``profile.py``) once
early and again when steps get slower than the machine; on a NaN/Inf, ``nonfinite.py`` hooks
the next forwards to name the first module that produced it. ``fit()`` drives it as a
``Callback``; ``treeqa doctor`` and the Lightning adapter drive the same
``begin_step``/``end_step`` API.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, MutableSequence, Sequence
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import nn

from treeqa.health import checks, findings, loss_levels, report, sites, timing, wrap
from treeqa.health.built_layers import BuiltLayers
from treeqa.health.collapse import ConstantOutputs
from treeqa.health.detached import TargetGradients
from treeqa.health.draws import Draws
from treeqa.health.final_states import FinalStates
from treeqa.health.findings import Finding
from treeqa.health.heap import heap_mb
from treeqa.health.loaders import Loaders
from treeqa.health.losses import LossInputCheck
from treeqa.health.model_inputs import ModelInputs
from treeqa.health.nonfinite import NonFiniteTracer
from treeqa.health.packing import PackedLengths
from treeqa.health.pairing import Pairing
from treeqa.health.positions import PositionTables
from treeqa.health.profile import ProfileWindow
from treeqa.health.readings import LossReadings
from treeqa.health.repeats import SameInputs
from treeqa.health.retention import Retention
from treeqa.health.runqueue import RUN_QUEUE, waited_since
from treeqa.health.scalers import MIN_SCALE, LossScalers
from treeqa.health.shared_norms import SharedNorms
from treeqa.health.thinning import Thinning, row
from treeqa.health.wrap import mark_never_compiled, never_compiled, say_failed
from treeqa.health.zeroed import ZeroGradients
from treeqa.models.common import Output
from treeqa.train.callbacks import EarlyStopping
from treeqa.train.loop import Callback, TrainConfig, TrainState

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
RSS_EVERY = 10  # a read of /proc costs ~50 us after a step; a trend needs far fewer reads
RSS_EVERY_S = 0.05  # but slow steps are each read (<= 0.1%): a short run still gets a trend
HEAP_EVERY_S = 0.5  # and the C heap (with RSS) at most this often: ~0.2 ms on a fragmented heap
HEAP_AFTER_MB = 4.0  # or when RSS moved this much since the heap was last read
TIMED_ALL = 200  # the CPU clock and reference workload on each of the first 200 steps,
TIMED_EVERY = 4  # then every 4th (~80 us after a step): a quarter of n steps has >= n/16 readings
SERIES_CHECKS = 32  # series checks every `every` steps, or every 1/32 of the steps so far:
# each reads the whole series, so a fixed interval would cost in proportion to the run's length
FIT_MEMORY_WARMUP = 1000
"""Under fit(), memory growth is judged after the first epoch or after this many steps."""
UNUSED_STEPS = 100
"""A parameter is unused when it got no gradient in this many steps (or the whole run, if
shorter): a branch taken on some steps only (a conditional head, an expert a router picked for
no token of a small batch, stochastic depth) gets one within a few."""


def compiled() -> bool:
    """Whether torch.compile has compiled a frame in this process. Dynamo guards on the global
    hook dicts, so a global hook added and removed on sampled steps would recompile the model
    each time and, past its recompile limit (8), leave it running eagerly; inside a compiled
    graph such hooks see nothing anyway."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None) if utils is not None else None
    return bool(counters and counters.get("frames", {}).get("total"))


def compiled_module(model: nn.Module) -> bool:
    """Whether ``model`` is ``torch.compile(module)``'s wrapper or a module compiled in place
    (``module.compile()``): it compiles on its first call, so no global hook may be there then
    (the graph would be compiled with it, and again without it)."""
    return type(model).__name__ == "OptimizedModule" or (
        getattr(model, "_compiled_call_impl", None) is not None
    )


def for_run(
    train: TrainConfig, run_dir: Path, resumed: TrainState | None, main: bool
) -> HealthMonitor | None:
    """The monitor of a training run writing ``run_dir/health.json`` (None when
    ``train.health`` is off, or when a finished run is resumed, as ``evaluate --seeds`` does:
    it trains nothing, so its report stays; so does a run that stopped early, resumed with the
    same ``train.patience``). On process ``main``, a report an earlier part of the run wrote is
    kept."""
    if train.health == "off":
        return None
    done = EarlyStopping(train.patience).due
    if resumed is not None and (resumed.epoch >= train.epochs or done(resumed)):
        return None
    if main:
        report.keep_earlier(run_dir / "health.json")
    return HealthMonitor(train.health, json_path=run_dir / "health.json")


class HealthError(RuntimeError):
    """Raised (doctor) or turned into ``state.stop`` (fit) by an error finding in strict mode."""


class _Statm:
    """``/proc/self/statm`` kept open: a read after a step costs ~50 us, against ~150 us to open
    and close it each time (hot: 3 against 22 us)."""

    def __init__(self) -> None:
        self.pid, self.fd = -1, -1

    def resident_pages(self) -> int:
        if self.pid != os.getpid():  # first read, or a forked child (the file is its parent's)
            self.pid, self.fd = os.getpid(), os.open("/proc/self/statm", os.O_RDONLY)
        return int(os.pread(self.fd, 128, 0).split()[1])


_STATM = _Statm()


def _prefixed(model: nn.Module, i: int) -> Iterator[tuple[str, nn.Parameter]]:
    """A watched model's parameters named as the findings name its modules (``model1.`` before
    the second model's)."""
    for name, p in model.named_parameters():
        yield (f"model{i}." if i else "") + name, p


def _computed_with(model: nn.Module, i: int) -> Iterator[tuple[str, nn.Parameter]]:
    """``_prefixed``'s parameters less embedding tables': a table's rows are looked up, not
    computed with, so a row no batch looks up costs nothing however small its values (the
    rows of words a run never sees, shrunk by weight decay into subnormals)."""
    tables = {
        id(p)
        for m in model.modules()
        if isinstance(m, nn.Embedding | nn.EmbeddingBag)
        for p in m.parameters(recurse=False)
    }
    return (x for x in _prefixed(model, i) if id(x[1]) not in tables)


def rss_mb() -> float:
    try:
        return _STATM.resident_pages() * _PAGE / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Canary:
    """A fixed CPU workload, timed after a step: how fast this machine runs now.

    On a shared host the speed of a core drifts (other tenants, clock changes) by up to 2x
    within a minute, and every step drifts with it; CPU time drifts too, so it cannot tell
    this from a leak. A leak slows the steps but not this workload, timed hot: its first pass
    right after a step runs on caches the step filled (~10-25 us against ~5 us hot), and
    state that grows fills more of them (the corpus memory bank, whose steps got 4.5x
    slower: first pass 11.5 -> 23.5 us over the run, second 4.9 -> 5.1 us), so a first pass
    read as the machine's speed took half the leak's slowdown for the machine's. The first
    pass warms the caches; the second is timed. Every step while a run is short: read every
    4th step from the start, an 80-step script had ~5 readings a quarter, too few (3 of 15
    clean runs flagged on a busy host, as without it).
    """

    def __init__(self) -> None:
        # No RNG (the script's random stream stays its own) and no default device or dtype
        # (a script may set CUDA as the default; that must not initialise CUDA here).
        a = torch.linspace(-1.0, 1.0, 16 * 32, device="cpu", dtype=torch.float32)
        self.a = a.reshape(16, 32, 1)  # [16, 32, 1]
        self.b = a.reshape(1, 16, 32).repeat(1, 2, 1)  # [1, 32, 32]

    def __call__(self) -> float:
        """A [16, 32] x [32, 32] product as elementwise work on one thread, twice, the second
        timed: a BLAS matmul would start its thread team here, and a script that trains a
        model too small to start it and then forks would have its child hang in its first
        matmul. Under 32,768 elements, torch runs it on the calling thread; no grad, no
        graph."""
        (self.a * self.b).sum(1)  # [16, 32, 32] -> [16, 32]: warms the caches
        start = time.perf_counter()
        (self.a * self.b).sum(1)
        return time.perf_counter() - start


LOW_LR = ("lr-zero", "lr-schedule-stalled", "lr-collapsed", "lr-lambda-returns-rate")
"""Findings of a learning rate too low to train, which a loss at chance then follows."""


class HealthMonitor(Callback):
    """Watches a training run and reports ``Finding``s (see ``treeqa.health.findings.CODES``).

    ``mode`` is "on" or "strict": an error finding sets ``stop_requested`` (``fit()``, the
    Lightning adapter and the doctor stop the run on it; a loop of your own checks it after
    ``end_step``). ``every``: steps between sampled steps (a positive int). ``json_path``,
    ``plot_path``: where ``finish()`` writes the report and its plot (checked here, before the
    run). ``scan_budget``: share of wall time the gc walks may take (above 0, at most 1).
    """

    main_only = True  # under torchrun, process 0 watches (its steps wait for the others')

    def __init__(
        self,
        mode: str = "on",
        every: int = 50,
        json_path: str | Path | None = None,
        plot_path: str | Path | None = None,
        scan_budget: float = 0.005,
        stream: TextIO | None = None,
    ):
        if mode not in ("on", "strict"):
            raise ValueError(f"health mode {mode!r}: expected on | strict")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every={every!r}: expected a positive int (steps between samples)")
        if isinstance(scan_budget, bool) or not isinstance(scan_budget, int | float):
            raise ValueError(f"scan_budget={scan_budget!r}: expected a share of wall time")
        if not 0 < scan_budget <= 1:
            raise ValueError(f"scan_budget={scan_budget!r}: expected a share above 0, at most 1")
        from treeqa.health.script import writable  # (script.py imports this module)

        for name, path in (("json_path", json_path), ("plot_path", plot_path)):
            if path is not None:  # fail now, not after the run
                writable(name, Path(path))
        if plot_path is not None:
            report.check_plot_path(Path(plot_path), "plot_path")
        self.mode, self.every = mode, every
        self.json_path, self.plot_path = json_path, plot_path
        self.stream = stream or sys.stderr
        self.summary = True  # printed at the finish (not by one of several processes)
        self.findings: dict[tuple[str, str], Finding] = {}
        # array("d"): 8 bytes a value (a list of floats takes ~32), at most ``thinning.ROWS`` rows
        self.series: dict[str, MutableSequence[float]] = {
            k: array("d")
            for k in (
                "step",
                "step_time",
                "cpu_time",
                "canary",
                "cpu_wait",
                "data_time",
                "loss",
                "rss_mb",
                "heap_used_mb",
                "heap_free_mb",
                "cuda_mb",
                "autograd_nodes",
                "input_elements",
            )
        }
        self.thinning = Thinning()
        self.canary = Canary()
        self.models: list[nn.Module] = []
        # Each watched model's parameters its optimiser updates, as ``watch`` was given them
        # (None: all that require grad), so a later ``watch`` of another model keeps them.
        self._trained: list[set[int] | None] = []
        self.compiling = False  # a watched model is torch.compile's (compiled_module)
        # Elements of the tensors given to the trained models' forwards in this step (the
        # doctor's; 0 where not counted): the batch's size, another measure of the step's work.
        self.input_elements = 0
        self.params: list[tuple[str, nn.Parameter]] = []
        self.names: dict[int, str] = {}
        self.source_files: list[str] = []
        self.step = 0
        self.stop_requested = False
        self.paused = False
        self.sampling = False
        # Steps before this run's own: a forked process's parent's, or a script's earlier run's
        # (a second model trained after the first): its first steps are sampled as a run's are.
        self.steps_before = 0
        # Steps a run resumed from a checkpoint took before this monitor started (fit()): its
        # report covers the steps after them.
        self.resumed_at = 0
        self.timed = False  # this step's CPU time and the reference workload are read
        self.in_step = False  # between begin_step and end_step: a finding now is the next step's
        self.unstepped_backwards = 0  # backward() calls in a script that never stepped (doctor)
        # sampled steps whose loss is a cross-entropy: C, and the factor the loss backward was
        # given is it times (1/k under gradient accumulation over k)
        self.chance: list[tuple[int, int, float]] = []
        # their targets' class counts, by step (``priors.LabelCounts.batch``)
        self.batch_labels: dict[int, torch.Tensor] = {}
        # The optimiser that steps (its class name) when it has maximize=True (the doctor's)
        self.maximize = ""
        self.maximize_weights = False  # and a group with it holds nn.Parameters
        # sampled steps whose loss is itself a regression loss (F.mse_loss, ...): its name, and
        # the factor as for ``chance``
        self.regression: list[tuple[int, str, float]] = []
        # their targets' sums, by step, where the loss is a mean squared error
        # (``priors.TargetMoments.batch``)
        self.batch_moments: dict[int, tuple[tuple[int, ...], int, torch.Tensor]] = {}
        self.failed = False  # its own code failed (``safely``): it stopped watching
        self.failures_from = len(wrap.FAILURES)  # its own failures are those said after this
        self._anomaly = 0  # sampled steps run with autograd's anomaly detection on
        self.goes_on = "training goes on"  # what happens after a failure, said with it
        self._next_series_check = self.every
        self._hooks: list[Any] = []
        self._rms: dict[str, torch.Tensor] = {}
        self._kinds: dict[str, tuple[Any, ...]] = {}  # of the modules numbered in a stack
        self.inputs = ModelInputs(self.add)  # raw pixels, RNN layouts, dims reordered by view
        self.built = BuiltLayers(self.add)  # layers made inside a forward
        self.finals = FinalStates(
            self.add, self.safely, lambda: self.sampling and not self.paused
        )  # recurrent layers' final states after padding
        self.positions = PositionTables(self.add)  # a position table added by the batch's dim
        self.norms = SharedNorms(self.add)  # one batch norm at two places of a forward
        self.collapse = ConstantOutputs(self.add, lambda: self.models)  # one output for all
        self.packing = PackedLengths(self.add, lambda: self.sampling and not self.paused)
        self._unused: set[str] | None = None  # no gradient in the first sampled steps
        self._unused_params: list[tuple[str, nn.Parameter]] = []  # and since then, to check
        # A reported unused-parameter finding and (some of) its parameters, watched for a
        # gradient that comes later (a loss switched on after a warm-up).
        self._late: tuple[Finding, list[nn.Parameter]] | None = None
        # an unused-parameter finding, the ids of the layers holding them, until one runs, and
        # of those whose other weights got gradients
        self._why_unused: tuple[Finding, set[int], set[int]] | None = None
        self._unused_from = 1  # the first step of the window (later after a new model)
        self.nonfinite = NonFiniteTracer(self.add)
        self.zeroed = ZeroGradients(self.add)  # exactly zero through torch.round and the like
        self.profile = ProfileWindow(memory=rss_mb, waited=RUN_QUEUE.waited, heap=heap_mb)
        self.loaders = Loaders(self.add)  # DataLoader workers, iterators and samplers
        # one batch at every step; inputs and targets from two loaders shuffled apart
        self.repeats = SameInputs(self.add, lambda: self.models, lambda: self.loaders.drawn_batches)
        self.pairing = Pairing(self.add, lambda: self.models, lambda: self.loaders.drawn_batches)
        # a loss's target from another forward of the model it scores, with gradients
        self.detached = TargetGradients(self.add, lambda: self.models)
        # a draw taken with sample() that feeds the model: no gradient reaches its parameters
        self.draws = Draws(
            self.add, lambda: self.sampling and not self.paused, lambda: [p for _, p in self.params]
        )
        self.scalers = LossScalers()  # fp16 loss scalers: their overflows are no NaN
        # Graphs kept past their step: retain_graph=True, and gc scans for what holds them.
        self.retention = Retention(self.add, self.every, scan_budget, self.source_files)
        self._last_rss = 0.0
        self._last_heap: tuple[float, float] | None = None
        self._heap_read_at = self._rss_read_at = -math.inf
        # RSS when the heap was last read: a move of ``HEAP_AFTER_MB`` reads it again, so a
        # rise of RSS is judged with the heap's reading of it (50 MB that filled malloc's
        # free heap within 0.5 s read as memory-growth on the heap's reading from before)
        self._rss_at_heap = -math.inf
        self._cpu_begin = time.process_time()
        self._wait_begin = RUN_QUEUE.waited()
        self._node_read: tuple[int, int] | None = None  # (step, its loss's autograd number)
        self._begin_cost = 0.0  # seconds begin_step took: the monitor's, not the step's
        self.losses = LossReadings()
        # checks judged at the run's end over its steps and their losses (``even``), the doctor's
        self.at_end: list[Callable[[Sequence[float], Sequence[float]], None]] = []
        self.at_end.append(lambda steps, losses: self.loaders.replicas.finish())
        # Steps whose memory is allocator warm-up, left out of the memory-growth check. Under
        # fit() the first epoch (every batch shape seen once, so RSS climbs to its working size)
        # or FIT_MEMORY_WARMUP steps, whichever ends first; elsewhere warmup_of(n) only.
        self.memory_warmup = 0
        self.loss_check = LossInputCheck(
            self.add,
            lambda: self.sampling and not self.paused,
            lambda: self.step == 0,
            self.loaders.note_target,
        )
        self.loss_check.weights.natural = self.loaders.trained_labels  # (class-balanced-twice)
        self.loss_check.trained_targets += [
            self.pairing.target,
            self.repeats.target,
            self.detached.target,
        ]
        self.loss_check.fed.append(self.draws.fed)
        self.started = time.time()

    # ------------------------------------------------------------------ API for any loop

    def watch(self, *models: nn.Module, trained: Iterable[nn.Parameter] | None = None) -> None:
        """Check these models (parameter aliases now; unused parameters and activations later).

        ``trained``: the parameters an optimiser updates, when known. Only those can be unused:
        a backbone run under ``no_grad`` for a linear probe, left out of the optimiser, is
        frozen on purpose even where its ``requires_grad`` is still True."""
        for model in models:
            if not isinstance(model, nn.Module):
                raise TypeError(f"watch() takes nn.Module models, not {type(model).__name__}")
        keep = None if trained is None else {id(p) for p in trained}
        for model in models:
            if any(model is m for m in self.models):
                continue
            self.models.append(model)
            self._trained.append(keep)
            self.compiling |= compiled_module(model)
            for finding in checks.parameter_aliases(model):
                self.add(finding)
            for cls in {type(m) for m in model.modules()}:
                site = sites.definition_file(cls)
                if site and site not in self.source_files and "site-packages" not in site:
                    self.source_files.append(site)
        self.names = checks.module_names(self.models)
        self.norms.roots = {id(m) for m in self.models}
        modules = self._modules()
        self.loss_check.watch(modules)
        # A dense 2-D conv over embedded text (the QANet report's 2-D character CNN), which a
        # 1-D depthwise-separable one replaces. An image CNN's convolutions dominating is how
        # it should look, a diffusion model's with a timestep Embedding too.
        dims = {m.embedding_dim for m in modules if isinstance(m, nn.Embedding | nn.EmbeddingBag)}
        self.profile.conv_over_text = any(checks.conv_over_embedding(m, dims) for m in modules)
        self.nonfinite.names = self.names
        seen: set[int] = set()
        self.params = []
        for i, (model, kept) in enumerate(zip(self.models, self._trained, strict=True)):
            for name, p in model.named_parameters():
                if id(p) not in seen and p.requires_grad and (kept is None or id(p) in kept):
                    seen.add(id(p))
                    self.params.append(((f"model{i}." if i else "") + name, p))

    def unwatch(self) -> None:
        """Forget the models watched so far (their run is over and another model trains now):
        the monitor keeps them alive no longer, and the next step starts a new window for
        ``unused-parameter``."""
        self.models, self.params, self._trained = [], [], []
        self.loss_check.watch([])
        self._unused, self._unused_params, self._unused_from = None, [], self.step + 1
        self._late = self._why_unused = None

    def install_loss_checks(self) -> None:
        """Wrap the loss functions (``F.cross_entropy``, ``F.nll_loss``, ``F.mse_loss``, ...;
        nn losses call them) to look at their input, ``DataLoader.__iter__`` and its
        iterators' ``__next__`` (``loaders.py``), ``GradScaler.scale`` to note fp16 loss
        scalers (``scalers.py``) and ``pack_padded_sequence`` to read its lengths
        (``packing.py``). Call it before the first loader is iterated; ``finish()`` (or
        ``uninstall()``, for a run that ends without a report) takes the wrappers off."""
        self.loss_check.install()
        self.loaders.install()
        self.scalers.install()
        self.packing.install()
        self.finals.install()
        self.draws.install()

    def uninstall(self) -> None:
        """Take off every hook and wrapper of this monitor (again: a no-op)."""
        self._remove_hooks()
        self.loss_check.uninstall()
        self.loaders.uninstall()
        self.scalers.uninstall()
        self.packing.uninstall()
        self.finals.uninstall()
        self.draws.uninstall()
        self.norms.unhook()
        self.built.close()

    def _sampled(self, s: int) -> bool:
        """Whether step ``s`` is sampled: the run's first 3, then every ``every``-th."""
        return s - self.steps_before <= 3 or s % self.every == 0

    def begin_step(self) -> None:
        """Call when the step's compute starts (after its batch is ready). Its own time (a
        profiler starting, hooks added on sampled steps) is taken off the ``step_time`` given
        to ``end_step``: ``fit()`` and the doctor start timing a step before they call it."""
        began = time.perf_counter()
        mark_never_compiled()  # (a list's truth once marked, or while nothing compiles)
        s = self.step + 1
        own = s - self.steps_before  # this run's own steps
        self.in_step = True
        self.retention.begin_step()
        self.timed = own <= TIMED_ALL or s % TIMED_EVERY == 0
        if self.timed:
            self._cpu_begin = time.process_time()
            self._wait_begin = RUN_QUEUE.waited()
        self.sampling = self._sampled(s)
        armed = self.nonfinite.armed
        hooks = (self.sampling or armed) and not (self.compiling or compiled())
        if self.sampling and hooks:
            self._rms, self._kinds = {}, {}
            self.inputs.begin_step()
            self.finals.begin_step()
            self.positions.begin_step()
            self.collapse.begin_step()
            self.repeats.begin_step()
            self.pairing.begin_step()
            self.detached.begin_step(s)
            # Through ``safely``: an output a hook cannot read is the monitor's failure, said in
            # one line, never the script's.
            hook = functools.partial(self.safely, self._rms_hook)
            self._hooks.append(
                torch.nn.modules.module.register_module_forward_hook(hook, with_kwargs=True)
            )
            before = functools.partial(self.safely, self._input_hook)
            self._hooks.append(torch.nn.modules.module.register_module_forward_pre_hook(before))
            self.built.open()
        if armed and hooks:
            self._hooks.append(self.nonfinite.begin_step(self.safely))
        if own == self.every + 1 and self.profile.windows == 0:
            self.profile.schedule(s)
        if self.profile.active:
            self.profile.begin(s)
        self._begin_cost = time.perf_counter() - began

    def note_backward(self, retain_graph: bool) -> None:
        self.retention.note_backward(retain_graph)

    def backward_returned(self) -> None:
        """The backward that a step ended inside (``doctor``: an optimiser stepped by a
        gradient hook) has returned: a profiler window stops here, outside the engine."""
        self._window_closed(self.profile.backward_returned())

    def end_step(
        self,
        loss: torch.Tensor | float | None,
        step_time: float,
        data_time: float = 0.0,
        value_of: tuple[torch.Tensor, int] | None = None,
    ) -> None:
        """Call after the optimiser step with the step's loss and its timings (seconds).

        ``value_of``: (a tensor whose value is the step's loss where ``loss``, the last
        backward's, is not; how many backward losses it adds up): the sum of the losses of n
        micro-batches each divided alike (n), the first of a closure's (1). The series holds
        it; the loss checks read a sum over the factors of its terms (each backward's)."""
        self.step = s = self.step + 1
        self.in_step = False
        step_time, self._begin_cost = max(0.0, step_time - self._begin_cost), 0.0
        waited = self._cpu_wait() if self.timed else math.nan  # before the monitor's own work
        value = math.nan  # a GPU tensor's value is filled in when its reading arrives
        tensor = loss if isinstance(loss, torch.Tensor) else None
        queued = tensor is not None and tensor.is_cuda
        shown, terms = (tensor, 1) if value_of is None or tensor is None else value_of
        if tensor is not None and shown is not None:
            self.retention.note_loss(s, tensor)
            if queued:
                self.losses.add(s, shown)
            else:  # read at once: ~10 us less after a step than through the queue
                value = (shown if shown.numel() == 1 else shown.detach().float().mean()).item()
        elif loss is not None:
            value = float(loss)
        # Also around profiler windows, so their buffers are subtracted from fresh reads.
        now = time.perf_counter()
        profiling = self.profile.recording  # (a window opens in begin_step, closes below)
        window = profiling or (s - 1) in self.profile.profiled
        if s % RSS_EVERY == 1 or now - self._rss_read_at >= RSS_EVERY_S or window:
            self._last_rss, self._rss_read_at = rss_mb(), now
            moved = abs(self._last_rss - self._rss_at_heap) >= HEAP_AFTER_MB
            if now - self._heap_read_at >= HEAP_EVERY_S or window or moved:
                self._last_heap, self._heap_read_at = heap_mb(), now
                self._rss_at_heap = self._last_rss
        series = self.series
        series["step"].append(s)
        series["step_time"].append(step_time)
        on_cpu = not torch.cuda.is_initialized()
        timed = self.timed and on_cpu
        series["cpu_time"].append(time.process_time() - self._cpu_begin if timed else math.nan)
        series["cpu_wait"].append(waited if timed else math.nan)
        # Not inside a profiler window: its operators would count as the script's.
        timed = timed and not profiling
        series["canary"].append(self.canary() if timed else math.nan)
        series["data_time"].append(data_time)
        series["loss"].append(value)
        # Neither the profiler's buffers nor these series (8 bytes a value, in malloc's heap)
        # are the script's; each comes off the reading that holds it.
        own = len(series) * 8 * len(series["step"]) / 2**20
        series["rss_mb"].append(self._last_rss - own - self.profile.memory_added)
        used, free = self._last_heap or (math.nan, math.nan)
        series["heap_used_mb"].append(used - own - self.profile.heap_added[0])
        series["heap_free_mb"].append(free - self.profile.heap_added[1])
        series["cuda_mb"].append(0.0 if on_cpu else torch.cuda.memory_allocated() / 2**20)
        series["autograd_nodes"].append(self._nodes(s, tensor) if self.timed else math.nan)
        series["input_elements"].append(float(self.input_elements) or math.nan)
        self.input_elements = 0
        if len(series["step"]) >= self.thinning.rows:
            self._thin()
        if self._hooks:
            self._remove_hooks()
        if self.sampling:
            self.built.close()
            ce, self.loss_check.cross_entropy = self.loss_check.cross_entropy, None
            self.loss_check.cross_entropies = {}
            factors, self.loss_check.factors = self.loss_check.factors, []
            # A sum of n backward losses: its factor is theirs added up (NaN: one was no
            # cross-entropy, and the sum none either).
            factor = ce[3] if ce is not None and terms == 1 else math.fsum(factors[-terms:])
            if terms > 1 and (len(factors) < terms or not math.isfinite(factor)):
                ce = None
            self.loss_check.scored = 0
            batch, self.loss_check.batch_labels = self.loss_check.batch_labels, None
            if ce is not None and tensor is not None and ce[0] == id(tensor) and ce[1] > 1:
                self.chance.append((s, ce[1], factor))  # the step's loss is that CE
                if batch is not None:
                    self.batch_labels[s] = batch
            fitted, self.loss_check.regression = self.loss_check.regression, None
            moments, self.loss_check.batch_moments = self.loss_check.batch_moments, None
            if fitted is not None and tensor is not None and fitted[0] == id(tensor):
                self.regression.append((s, fitted[1], fitted[3] * terms))
                if moments is not None:
                    self.batch_moments[s] = moments
            self._sampled_checks(s, tensor)
            self.sampling = False
            if self._sampled(s + 1) and not self.compiling:  # (steps 1-3: a layer made in the
                self.built.open()  # loop before the next step's forward is seen)
        if s - self._unused_from < 3 and self.params:
            self._note_unused(s)
        if self._unused_params:
            self._track_unused(s)
        if self._late is not None:
            self._check_late(s)
        self.retention.end_step(tensor)
        self.loaders.drawn_batches.kept.clear()  # (kept for a sampled step, until its end)
        self.loaders.keep = self._sampled(self.step + 1)  # the next one's are kept
        # No loss at all (gradients from torch.autograd.grad or torch.func, set by hand): the
        # NaN in the series is a placeholder, not a non-finite loss.
        if not queued and loss is not None:
            self._saw_loss(s, value)
        if self.losses.pending:
            self._read_losses(wait=False)
        if self.profile.active:
            self._window_closed(self.profile.end(s))
        self.retention.maybe_scan(s, tensor)
        if s >= self._next_series_check:
            self._next_series_check = s + max(self.every, s // SERIES_CHECKS)
            self._series_checks(s)

    def _nodes(self, s: int, loss: torch.Tensor | None) -> float:
        """Autograd nodes made per step since the last reading (NaN where unknown): the step's
        work, which grows when it runs more forwards (a longer episode). Autograd numbers the
        nodes it makes on a thread in order, so two steps' losses tell how many came between.
        Read on timed steps: a loss's ``grad_fn`` read after its backward costs ~30 us cold."""
        fn = loss.grad_fn if loss is not None else None
        if fn is None:
            return math.nan
        last, self._node_read = self._node_read, (s, int(fn._sequence_nr()))
        if last is None or self._node_read[1] <= last[1]:  # (another thread's numbering)
            return math.nan
        return (self._node_read[1] - last[1]) / (s - last[0])

    def _read_losses(self, wait: bool) -> None:
        """Put the loss readings that have arrived into the series and check them."""
        steps, losses = self.series["step"], self.series["loss"]
        for step, value in self.losses.ready(wait):
            at = row(steps, step)
            if at is not None:  # (None: a reading so late that its row was thinned out)
                losses[at] = value
            self._saw_loss(step, value)

    def _saw_loss(self, step: int, value: float) -> None:
        if value != value or value in (math.inf, -math.inf) or self.nonfinite.armed:
            losses = self.series["loss"]
            at = row(self.series["step"], step)  # this step's place in the series
            earlier = [] if at is None else losses[max(0, at - 10) : at]
            earlier = [v for v in earlier if math.isfinite(v)]
            self.nonfinite.saw_loss(step, value, earlier)

    def add(self, finding: Finding) -> None:
        finding.step = finding.step or self.step + self.in_step
        key = findings.key_of(finding.code, finding.where, finding.message, finding.evidence)
        old = self.findings.get(key)
        if old is None:
            finding.first_step = finding.first_step or finding.step
            self.findings[key] = finding
            print(report.one_line(finding), file=self.stream, flush=True)
        else:
            # The latest evidence, with the step it was seen at: the message names both.
            old.evidence, old.message, old.step = finding.evidence, finding.message, finding.step
            old.fix = finding.fix  # (a slowdown's, once its cause is named)
            old.where = finding.where or old.where  # e.g. the top operator of the latest window
            if findings.SEVERITIES.index(finding.severity) > findings.SEVERITIES.index(
                old.severity
            ):
                old.severity = finding.severity
                print(report.one_line(old), file=self.stream, flush=True)
            elif finding.evidence.get("stopped"):  # a growth seen early that has since stopped
                old.severity = finding.severity
        if self.mode == "strict" and self.findings[key].severity == "error":
            self.stop_requested = True

    def finish(self) -> dict[str, Any]:
        """Final analyses; write JSON/plot if asked; print the summary. Returns the report.
        The hooks and wrappers come off first: a later monitor in this process installs its
        own (one left in place would keep it from checking anything). Should the final
        analyses fail (the monitor's own bug), the report is still made, and lists it."""
        self._safely_uninstall()
        try:
            self._final_checks()
        except HealthError:
            raise
        except Exception as error:
            say_failed("the monitor's final checks", error, "the report is made without them")
        result = report.build(self)
        if self.summary:
            report.print_summary(result, self.stream)
        if self.json_path:
            report.write_json(result, self.json_path)
        if self.plot_path:
            report.write_plot(result, self.plot_path)
        return result

    def _final_checks(self) -> None:
        """The run-wide checks made at its end, on everything read: their findings are the
        last step's (a step opened and never ended, by an evaluation's forward after it, is
        none)."""
        self.in_step = False
        self._read_losses(wait=True)
        self._window_closed(self.profile.close(self.step))
        if self._unused_params:  # a run shorter than the window
            self._track_unused(self.step, last=True)
        self.nonfinite.finish()
        self.loss_check.ranges.finish()
        self.loss_check.scales.finish()
        self.loss_check.bounded.finish()
        self.loss_check.leaks.finish(self.step)
        steps, losses = self.even("step"), self.even("loss")
        for judge in self.at_end:
            judge(steps, losses)
        chance = (
            loss_levels.loss_at_chance(self.chance, steps, losses, self._chance_levels())
            if not self.loss_check.margin  # (a margin softmax's loss sits above log(C))
            else None
        )
        if chance is None and not self.maximize:
            levels = self.loss_check.moments.levels(self.batch_moments)
            chance = loss_levels.loss_at_mean(self.regression, steps, losses, levels)
        low = sorted({code for code, _ in self.findings if code in LOW_LR})
        if chance is not None and low:  # found first (the doctor's updates): the likelier cause
            chance.message += f"; the learning rate stayed low all run ({', '.join(low)})"
            chance.evidence["low_lr"] = low
        self._add_if(chance)
        # A loss that overflowed, or climbs from steps taken uphill, has its cause said.
        if not any(code in ("non-finite", "lr-negative") for code, _ in self.findings):
            self._add_if(loss_levels.loss_diverged(self.chance, steps, losses, self.maximize))
            if self.maximize_weights:
                self._add_if(
                    loss_levels.loss_climbed(self.regression, steps, losses, self.maximize)
                )
        if not any(code == "non-finite" for code, _ in self.findings):
            self._add_if(self.scalers.collapsed(self.step))
        self._series_checks(self.step)

    # ------------------------------------------------------------------ fit() callback

    def on_fit_start(
        self, state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        if state.step:  # resumed: this run's own steps are watched as a new run's first are
            self.resume_at(state.step)
        self.expect_epochs()
        self.watch(model, trained=[p for g in optimizer.param_groups for p in g["params"]])
        self.install_loss_checks()

    def resume_at(self, step: int) -> None:
        """The run resumes after ``step`` steps taken before this monitor (a checkpoint's): its
        steps are numbered on from there, and its first ones are sampled, profiled and scanned
        as a new run's are. Call before the first ``begin_step``."""
        self.step = self.steps_before = self.resumed_at = self.retention.first = step
        self._unused_from = step + 1
        self._next_series_check = step + self.every

    @never_compiled
    def safely(self, work: Callable[..., object], *args: Any) -> None:
        """The monitor's work inside the run it watches (``fit()``'s callbacks, the doctor's
        hooks): should it fail (the monitor's own bug), it says so once and stops watching;
        the run goes on. Strict mode's stop is no failure. Never compiled as a frame of its
        own (``wrap.never_compiled``)."""
        if self.failed:
            return
        try:
            work(*args)
        except HealthError:
            raise
        except Exception as error:
            self.failed = True
            say_failed("the monitor", error, f"it stops watching and {self.goes_on}")
            self._safely_uninstall()

    def _safely_uninstall(self) -> None:
        try:
            self.uninstall()
        except Exception:  # the wrappers' undo only restores attributes; nothing more to do
            pass

    def on_batch_start(self, state: TrainState, batch: Any) -> None:
        self.safely(self.begin_step)

    def on_step_end(self, state: TrainState, output: Output, batch: Any) -> None:
        self.safely(self.end_step, output.loss, state.step_time, state.data_time)
        if self.stop_requested and not state.stop:
            errors = [f for f in self.findings.values() if f.severity == "error"]
            print(
                f"treeqa health (strict): stopping at step {self.step}: {errors[0].code}: {errors[0].message}",
                file=self.stream,
            )
            state.stop = state.abort = True  # the epoch is not finished: not scored or saved

    def on_epoch_end(self, state: TrainState, metrics: dict[str, float]) -> None:
        self.safely(self.epoch_ended)

    def expect_epochs(self) -> None:
        """The loop reports epoch ends (``epoch_ended``): judge memory after the first one."""
        self.memory_warmup = FIT_MEMORY_WARMUP

    def epoch_ended(self) -> None:
        """An epoch is over: memory growth is judged on the steps after the first one."""
        # Rows are steps here: thinned series hold more rows than FIT_MEMORY_WARMUP steps.
        self.memory_warmup = min(self.memory_warmup, len(self.series["rss_mb"]))

    def on_eval_start(self, state: TrainState, model: nn.Module) -> None:
        self.paused = True

    def on_eval_end(self, state: TrainState, model: nn.Module) -> None:
        self.paused = False

    def on_fit_end(self, state: TrainState) -> None:
        self.safely(self.finish)

    def on_teardown(self, state: TrainState) -> None:
        """However fit() ends (an exception included): nothing of the monitor stays behind."""
        self._safely_uninstall()

    # ------------------------------------------------------------------ sampled checks

    def _input_hook(self, module: nn.Module, inputs: Any) -> None:
        if id(module) in self.names and not checks.untraceable(inputs):
            self.positions.before(module, inputs)

    def _rms_hook(self, module: nn.Module, inputs: Any, keywords: Any, output: Any) -> None:
        if checks.untraceable(output):  # torch.compile's trace or a torch.func transform
            return
        name = self.names.get(id(module))
        if name is None:  # another model's (a generator of the first optimiser's critic)
            self.pairing.elsewhere(module, inputs, keywords)
            return
        if self.draws.pending:  # (its arguments, and keyword arguments, as they were given)
            self.draws.fed((*inputs, *keywords.values()), f"the forward of {name}", output)
        self.inputs.note(name, module, inputs, output)
        self.norms.note(name, module, inputs)
        self.finals.note(name, module, inputs, output)
        self.positions.note(name, module, inputs, output)
        self.collapse.note(name, module, inputs, output)
        self.repeats.note(name, module, inputs, keywords)
        self.pairing.forward(name, module, inputs, keywords, output)
        self.detached.forward(module, output)
        if name not in self._rms and checks.dense(output) and output.is_floating_point():
            self._rms[name] = output.detach().float().pow(2).mean().sqrt()
            if name[-1:].isdigit():  # a member of a stack (blocks.3): what it is, for the check
                self._kinds[name] = checks.module_kind(module)

    def _sampled_checks(self, s: int, loss: torch.Tensor | None) -> None:
        if torch.is_anomaly_enabled():  # one flag read
            self._anomaly += 1
            if self._anomaly == 2:  # on for more than a first step or two under watch
                self.add(checks.anomaly_detection_on(s))
        self.inputs.judge(self.loaders.batch_size)
        self.built.judge(s)
        self.norms.judge()
        self.finals.judge(s)
        drawn = (id(self.loaders.newest), self.loaders.drawn)  # moves with each batch drawn
        self.positions.judge(self.loaders.batch_size, drawn)
        if self._rms:
            names = list(self._rms)
            values = torch.stack(
                [v.to(self._rms[names[0]].device) for v in self._rms.values()]
            ).tolist()
            found = checks.activation_growth(dict(zip(names, values, strict=True)), self._kinds)
            if found is not None:
                mod = next(
                    (m for m in self._modules() if self.names.get(id(m)) == found.where + ".0"),
                    None,
                )
                found.where = (
                    f"{found.where} ({sites.definition_site(mod)})"
                    if mod is not None
                    else found.where
                )
                self.add(found)
        still = False  # every gradient exactly zero: nothing trains the model yet (a policy's
        # head at zero before its first reward), so a constant output is no collapse
        if self.params:
            bad, zero = checks.gradient_flags(self.params)
            scale = self.scalers.scale() if bad else None
            if scale is None or scale < MIN_SCALE:  # else an overflow the loss scaler skipped
                self.nonfinite.saw_gradients(s, bad)
            self.zeroed.saw(s, zero, loss, self.params)
            still = bool(zero) and len(zero) == sum(p.grad is not None for _, p in self.params)
        self.collapse.judge(s, still)
        self.repeats.judge(s)
        self.pairing.judge(s)
        self.detached.end_step()
        self.draws.judge(s)

    def _note_unused(self, s: int) -> None:
        """The first three steps of the window give the candidates (every parameter looked
        at); each later step looks at those few only, until the window ends."""
        unused = {n for n, p in self.params if p.grad is None}
        self._unused = unused if self._unused is None else self._unused & unused
        if s - self._unused_from == 2:
            self._unused_params = [(n, p) for n, p in self.params if n in self._unused]
            if len(self._unused_params) == len(self.params):  # no backward reached them
                self._unused_params = []

    def _track_unused(self, s: int, last: bool = False) -> None:
        """Drop the candidates that got a gradient this step; report the rest when the window of
        ``UNUSED_STEPS`` steps (or the run, ``last``) is over."""
        self._unused_params = [(n, p) for n, p in self._unused_params if p.grad is None]
        steps = s - self._unused_from + 1
        if not self._unused_params or (steps < UNUSED_STEPS and not last):
            return
        names = sorted(n for n, _ in self._unused_params)
        count = sum(p.numel() for _, p in self._unused_params)
        found = Finding(
            "unused-parameter",
            "warning",
            f"{len(names)} parameter tensors ({count} values) never received a gradient in "
            f"{steps} steps: {', '.join(names[:5])}",
            where=names[0],
            evidence={"parameters": names[:20], "values": count, "steps": steps},
        )
        self._late = (found, [p for _, p in self._unused_params[:20]])
        if not last:  # the next step tells whether their layers run (the hook is off after it)
            ids = {id(p) for _, p in self._unused_params}
            layers = [m for m in self._modules() if any(id(p) in ids for p in m.parameters(False))]
            # layers whose other weights got gradients: their output reaches the loss
            trained = {id(p) for _, p in self.params}
            used = {
                id(m)
                for m in layers
                if any(id(p) in trained and id(p) not in ids for p in m.parameters())
            }
            self._why_unused = (found, {id(m) for m in layers}, used)
            hook = functools.partial(self.safely, self._unused_ran)
            self._hooks.append(torch.nn.modules.module.register_module_forward_hook(hook))
        self._unused_params = []
        self.add(found)

    def _unused_ran(self, module: nn.Module, inputs: Any, output: Any) -> None:
        """A layer holding unused parameters ran: then they are cut off from the loss, by
        ``torch.no_grad()`` around it or by what comes after it, which the finding says."""
        if self._why_unused is None or id(module) not in self._why_unused[1]:
            return
        if not module.training:  # an evaluation's forward says nothing of training's
            return
        found, used, self._why_unused = self._why_unused[0], self._why_unused[2], None
        if id(module) in used and torch.is_grad_enabled():
            found.message += (
                "; their layers run in the forward, with gradients on, and reach the loss "
                "through their other weights, but their forward never uses these (declared, "
                "then left out of it?)"
            )
            found.fix = "use them in the forward of the layer that declares them, or remove them"
            found.evidence["layers_run"] = "not used in their forward"
            return
        if not torch.is_grad_enabled():
            found.message += (
                "; their layers do run in the forward, but under torch.no_grad() (a no_grad "
                "block, or a reentrant checkpoint, use_reentrant=True, over inputs that need no "
                "gradient)"
            )
            found.fix = (
                "run those layers with gradients on: outside the torch.no_grad() block, or "
                "through checkpoint(..., use_reentrant=False)"
            )
        else:
            found.message += (
                "; their layers do run in the forward, with gradients on, but what they compute "
                "never reaches the loss: left unused (computed, then not added in?), or detached "
                "(.detach(), .item(), .data, a round trip through NumPy)"
            )
            found.fix = (
                "use their output on the way to the loss, or drop what detaches it; if they are "
                "not needed, remove them"
            )
        found.evidence["layers_run"] = "no_grad" if not torch.is_grad_enabled() else "detached"

    def _check_late(self, s: int) -> None:
        """A reported parameter got a gradient after all: a loss or branch switched on later
        in the run, not a parameter wired to nothing. The finding becomes information."""
        found, params = self._late  # type: ignore[misc]
        if all(p.grad is None for p in params):
            return
        self._late = None
        found.severity = "info"
        found.message += (
            f"; they got gradients from step {s} on: a loss or branch switched on later"
        )
        found.evidence["first_gradient_step"] = s
        print(report.one_line(found), file=self.stream, flush=True)

    # ------------------------------------------------------------------ series and profiles

    def even(self, name: str) -> Sequence[float]:
        """The series ``name`` at one stride all through (``thinning.py``): a quarter of its
        values is a quarter of the steps, as the checks over quarters of the run and the report
        read it."""
        return self.thinning.even(self.series[name])

    def _chance_levels(self) -> dict[int, float]:
        """The chance level of each sampled step's cross-entropy where its labels' classes are
        imbalanced (``priors``): the loss there of predictions that give each class as often
        as the labels do. Steps not here are at log(C)."""
        return self.loss_check.labels.levels(self.chance, self.batch_labels)

    def _thin(self) -> None:
        """The series are full: thin their older rows, and forget the sampled steps whose rows
        went with them (their loss can no longer be read)."""
        self.thinning.thin(self.series)
        keeps = self.thinning.keeps
        self.chance = [sample for sample in self.chance if keeps(sample[0])]
        self.batch_labels = {s: n for s, n in self.batch_labels.items() if keeps(s)}
        self.regression = [sample for sample in self.regression if keeps(sample[0])]
        self.batch_moments = {s: m for s, m in self.batch_moments.items() if keeps(s)}

    def _series_checks(self, s: int) -> None:
        profiled, even, stride = self.profile.profiled, self.even, self.thinning.stride
        steps = even("step")
        first = int(steps[0]) if steps else 1  # > 1 on resume

        def unprofiled(values: Sequence[float]) -> MutableSequence[float]:
            out = array("d", values)
            for step in profiled:
                at, off = divmod(step - first, stride)
                if off == 0 and 0 <= at < len(out):
                    out[at] = math.nan
            return out

        times = unprofiled(even("step_time"))
        warm = self.thinning.warm_rows(steps, self.memory_warmup)
        # With the work on the CPU, a slowdown must show in CPU time too (not just other jobs),
        # and beyond the machine's own speed (the canary).
        on_cpu = not torch.cuda.is_initialized()
        cpu = unprofiled(even("cpu_time")) if on_cpu else None
        canary = even("canary") if on_cpu else None
        wait = unprofiled(even("cpu_wait")) if on_cpu else None
        work = timing.most_growth(even("autograd_nodes"), even("input_elements"))
        # One torch thread: no thread of the step spins for a preempted sibling, so the time it
        # ran is its own work however busy the host (``one_thread``).
        one_thread = torch.get_num_threads() == 1
        slower = timing.step_time_regression(times, cpu, canary, wait, work, one_thread)
        if slower is not None and on_cpu:
            named = (x for i, m in enumerate(self.models) for x in _computed_with(m, i))
            slower = timing.subnormal_cause(slower, named)
        rss = even("rss_mb")[warm:]
        heap = (even("heap_used_mb")[warm:], even("heap_free_mb")[warm:])
        device = even("cuda_mb")[warm:] if not on_cpu else None
        for found, code, kind, values, what in (
            (slower, "step-time-regression", "", times, "getting slower"),
            (
                timing.memory_growth(rss, "host RSS", 32.0, heap),
                "memory-growth",
                "host RSS",
                rss,
                "rising",
            ),
            (
                timing.memory_growth(device, "device memory", 16.0) if device else None,
                "memory-growth",
                "device memory",
                device or [],
                "rising",
            ),
        ):
            if found is not None:
                self.add(found)
            else:
                self._lower_if_stopped(code, kind, values, what)
        self._add_if(self._input_bound())
        self.profile.schedule_if_slower(times, s + 1, canary, wait, work)

    def _lower_if_stopped(self, code: str, kind: str, values: Sequence[float], what: str) -> None:
        """A growth found on the way (``code``, of ``kind``), no longer found now, whose series
        ``values`` stopped rising a quarter of the run or more ago: a buffer or cache that
        filled up to its size, said as information. A slowdown whose cause is named
        (subnormal weights) stays as it is."""
        for key, found in self.findings.items():
            if key[0] != code or found.severity == "info" or found.evidence.get("stopped"):
                continue
            if found.evidence.get("kind", "") != kind or "subnormal_weights" in found.evidence:
                continue
            if timing.stopped(values, timing.warmup_of(len(values))):
                timing.as_stopped(found, what)

    def losses_since(self, step: int) -> list[float]:
        """The loss of every step from ``step`` on, as the series keeps them (thinned in a
        long run; NaN where none was read)."""
        return [
            v for s, v in zip(self.series["step"], self.series["loss"], strict=True) if s >= step
        ]

    def _cpu_wait(self) -> float:
        """Seconds this step's thread waited for a CPU (NaN if the step ended on another)."""
        return waited_since(self._wait_begin, RUN_QUEUE.waited())

    def _input_bound(self) -> Finding | None:
        """``input-bound``, advised by the most workers of a DataLoader iterated in the run."""
        return timing.input_bound(
            self.series["data_time"], self.series["step_time"], self.loaders.most
        )

    def _window_closed(self, hot_op: Finding | None) -> None:
        """Where a profiler window may have closed: its ``hot-op``, and on a GPU ``device-idle``."""
        self._add_if(hot_op)
        self._add_if(self._device_idle())

    def _device_idle(self) -> Finding | None:
        """``device-idle`` of the window that closed last on a GPU: its kernels' time per step
        against the steps outside windows."""
        device, self.profile.device = self.profile.device, None
        if device is None:
            return None
        steps, times, profiled = (
            self.series["step"],
            self.series["step_time"],
            self.profile.profiled,
        )
        outside = [t for st, t in zip(steps, times, strict=True) if st not in profiled]
        return timing.device_idle(*device, outside)

    def _add_if(self, found: Finding | None) -> None:
        if found is not None:
            self.add(found)

    def _modules(self) -> list[nn.Module]:
        return [m for model in self.models for m in model.modules()]

    def _remove_hooks(self) -> None:
        while self._hooks:
            self._hooks.pop().remove()
