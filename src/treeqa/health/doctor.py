"""Run any PyTorch training script under the health monitor, without the script importing treeqa.

Step boundaries come from global hooks installed before the script starts: a step begins at
the first module forward after the previous optimiser step (the gap before it is data time)
and ends at ``Optimizer.step`` (a global optimiser post-hook), or at ``GradScaler.step`` where
the loss scaler skipped the optimiser step for an overflow, or, in a script with no optimiser,
where the weights a backward trained are found moved (updated by hand: ``hand.py``); a forward
of a trained model in eval mode without gradients is an evaluation between steps and starts
none. The first optimiser that steps is the clock until another steps on without it (a second
run in the script). ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped to
see the loss and ``retain_graph`` (not a call a backward makes: reentrant activation
checkpointing recomputes its blocks and backpropagates through them inside the script's).
The script runs as ``__main__`` (``-m``: through ``runpy``) with its own ``sys.argv``; its
output, files and exit code are its own, and the monitor writes only to stderr and the report
paths.
"""

from __future__ import annotations

import contextlib
import functools
import io
import multiprocessing.util
import operator
import os
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.amp import GradScaler
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from treeqa.health import (
    checks,
    copies,
    forks,
    hand,
    hooks,
    loss_inputs,
    processes,
    profile,
    report,
    resumes,
    script,
    sites,
    slips,
    wrap,
)
from treeqa.health.augmented import AugmentedEvaluation
from treeqa.health.carried_states import CarriedStates
from treeqa.health.changed_data import ChangedData
from treeqa.health.clipping import Clipping
from treeqa.health.copies import Copies
from treeqa.health.dropouts import Dropouts
from treeqa.health.heldout import HeldOut, given
from treeqa.health.loaded import LoadedWeights
from treeqa.health.masks import AttentionMasks
from treeqa.health.metric_resets import MetricResets
from treeqa.health.mixed_rows import MixedRows
from treeqa.health.monitor import HealthError, HealthMonitor, compiled, compiled_module
from treeqa.health.overlaps import Overlaps
from treeqa.health.predictions import Predictions
from treeqa.health.relabelled import EvaluationLabels
from treeqa.health.rounding import Rounding
from treeqa.health.scaled_steps import ScaledSteps
from treeqa.health.scales import InputScales
from treeqa.health.seeds import Seeds
from treeqa.health.splits import Splits
from treeqa.health.unknown_tokens import UnknownTokens
from treeqa.health.updates import Updates

REMADE_STEPS = 20
"""Steps in a row, each by an optimiser made for it, before ``optimiser-made-every-step``."""
SWITCH_AFTER = 8
"""Another optimiser that steps more than this many times (and more than 4x as often as any
did between two of the clock's steps so far) while the clock does not takes over as the clock:
the script's first run is over and a second one trains (a loop in a function called twice,
pre-training then fine-tuning with a new optimiser). When the clock's optimiser has been freed,
the next one to step takes over at once."""


class Doctor:
    """Global hooks that drive a ``HealthMonitor`` from an unmodified training script."""

    def __init__(self, monitor: HealthMonitor, prints: processes.Fingerprints | None = None):
        self.monitor = monitor
        # Weak: an optimiser whose run is over (and its state, twice the model for Adam) must
        # not stay alive for the rest of the script.
        self.clock: weakref.ref[torch.optim.Optimizer] | None = None
        self.clock_by_hand = False  # the clock is updates by hand (``hand.HandUpdates``)
        self.finding_roots = True  # the clock's next step looks up the models it trains
        self.called: dict[int, nn.Module] = {}
        self.roots: list[nn.Module] = []
        self.trained: set[int] = set()  # ids of the roots
        self.trained_before: set[int] = set()  # those of the clock before (a new optimiser)
        self.others: weakref.WeakKeyDictionary[torch.optim.Optimizer, int] = (
            weakref.WeakKeyDictionary()
        )  # steps of each other optimiser since the clock's last step
        self.most_between = 0  # the most steps another optimiser made between two clock steps
        self.open = False
        self.begun_by_forward = False  # a model's forward began this step (not the last's end)
        self.ended_in_backward = False  # the clock stepped by a gradient hook, in a backward
        self.loss: torch.Tensor | None = None
        self.loss_of_weights = False  # taken by torch.autograd.grad with respect to parameters
        # The step's backward losses so far: their sum (detached) and each one's factor
        # (``loss_inputs.unscaled``), to tell micro-batches each divided by their count.
        self.loss_values: list[torch.Tensor] = []
        self.loss_scales: list[float] = []
        self.loss_retained: list[bool] = []  # each backward's retain_graph
        self.last_end = time.perf_counter()
        self.compute_start = self.last_end
        # Seconds another optimiser stepped between the clock's step and the next step's
        # first forward (an embedding table's own Adam, stepped after the dense layers'):
        # compute of the next step, not its wait for data.
        self.carried = 0.0
        self.handles: list[Any] = []
        self.begins_handle: Any = None  # the optimiser pre-hook, while updates by hand may end
        self.discovery: Any = None  # the every-module hook, while models are looked up
        self.late_tops = False  # it stays for the clock's second step (_hook_late_tops)
        self.looked_again = False  # a step no hooked model began had the models looked up again
        self.hooked: set[int] = set()  # the models whose forwards start a step
        self.root_handles: list[Any] = []
        self.step_calls = 0  # optimiser steps seen, of any optimiser
        self.stepped: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # any, ever
        self.clock_params: set[int] = set()  # ids of the clock's parameters
        self.remade = 0  # clock steps in a row, each by an optimiser new at that step
        # the clock a new optimiser over its parameters was taken to replace (it should step
        # no more)
        self.replaced: weakref.ref[torch.optim.Optimizer] | None = None
        self.replaced_at = 0  # the steps counted when it was
        self.put_back = False  # an optimiser's first step began with SAM's uphill move undone
        # Weights updated by hand, until a torch.optim optimiser steps (hand.py).
        self.hand: hand.HandSteps | None = hand.HandSteps()
        # What the clock's steps are given (updates.py).
        self.updates = Updates(monitor.add, monitor.scalers)
        # F.dropout left on in evaluations, or trained at TensorFlow's keep probability
        self.dropouts = Dropouts(monitor.add)
        self.heldout = HeldOut(monitor.add)  # evaluation rows trained on by an earlier phase
        self.splits = Splits(monitor.add)  # an evaluation loader's rows among the training one's
        # a torchmetrics metric computed once a pass and never reset
        self.evaluated_at: int | None = None  # the clock's step count at the latest evaluation
        self.metric_resets = MetricResets(monitor.add, self._epoch)
        monitor.loaders.on_made = self._loader_made
        # examples changed in place by their own reading (a dataset's, or a sliced tensor's)
        self.changed = ChangedData(monitor.add)
        monitor.at_end.append(self.changed.finish)
        self.scales = InputScales(monitor.add)  # evaluation inputs off the training ones' scale
        self.overlaps = Overlaps(monitor.add)  # Dice or IoU by hand over logits
        self.predictions = Predictions(monitor.add)  # a model's output scored wrongly
        # evaluation passes over the same examples with other inputs
        loaders = monitor.loaders
        loaders.augmented = AugmentedEvaluation(monitor.add, loaders.trained_on)
        # an evaluation's class indices not the training ones
        self.labels = self.predictions.labels = EvaluationLabels(
            monitor.add, lambda: monitor.sampling, loaders.trained_on
        )
        monitor.loss_check.targets.append(self.labels.target)
        monitor.loss_check.fed.append(self.predictions.thresholds.loss_input)
        self.rounding = Rounding(monitor.add)  # half-precision weights that updates leave put
        # Attention masks leaving only the padding open, or a language model's future.
        self.masks = AttentionMasks(monitor.add, lambda: monitor.sampling and not monitor.paused)
        monitor.loss_check.targets.append(self.masks.causal.target)
        monitor.loss_check.graded = self.updates.loss_computed
        monitor.loss_check.backwards.append(self.masks.causal.backward)
        monitor.at_end.append(self.masks.causal.finish)
        self.broadcast_found = False  # a hand-written loss over [N, 1] - [N] (said once)
        self.seeds = Seeds(monitor.add)  # torch.manual_seed(s) on every step
        # Modules run in eval mode without gradients before the clock knows its models.
        self.evaluated_early: set[int] = set()
        # Clips of the wrong gradients (before backward, before a scaler's unscale_).
        self.clipping = Clipping(monitor.add, self.updates, monitor.scalers)
        # a recurrent layer's state carried from batch to batch over independent batches
        self.states = CarriedStates(
            monitor.add, monitor.safely, self._shuffled, lambda: monitor.loaders.draws
        )
        # a model in eval mode whose output for one example changes with the rest of its batch
        self.mixed = MixedRows(monitor.add, self._batch_rows)
        monitor.loss_check.trained_targets.append(self.mixed.target)
        # a text model's token ids mostly one id (a vocabulary lookup that fails)
        self.tokens = UnknownTokens(
            monitor.add,
            monitor.safely,
            lambda: monitor.sampling,
            lambda: monitor.loaders.batch_size,
        )
        # A scaled loss stepped without its scaler, or an unscaled one stepped through it.
        self.scaled_steps = ScaledSteps(monitor.add, monitor.safely)
        monitor.scalers.on_scaled.append(self.scaled_steps.scaled)
        # a checkpoint's optimiser state left unloaded: torch.load and load_state_dict are
        # seen by the loss checks' wrappers
        self.resumes = monitor.loss_check.resumes = resumes.Resumes(
            monitor.add, lambda: monitor.step
        )
        self.updates.rates.scheduler_noted = self.resumes.scheduler_stepped
        # weights loaded, then written over or loaded into a model that is not trained
        self.loaded_weights = LoadedWeights(monitor.add)
        monitor.loss_check.modules_loaded.append(self.loaded_weights.loaded)
        monitor.at_end.append(self.loaded_weights.finish)
        # a copy of the model made before training, evaluated while still at its start
        self.copies = Copies(monitor.add, monitor.safely, lambda: monitor.step, self._optimised)
        self.loaded_weights.read_too = self.copies.touched
        self.loaded_weights.taken_too = self.resumes.kept.taken
        monitor.loss_check.modules_loaded.append(self.copies.loaded)
        monitor.at_end.append(self.copies.finish)
        # One of several processes: what it trained, to compare with the others.
        self.prints = prints
        self.spawned: Path | None = None  # the reports of processes torch.multiprocessing started
        self.forks: forks.Forks | None = (
            None  # the processes multiprocessing starts, while installed
        )
        self.reports_to: tuple[Path | None, Path | None] = (None, None)  # their merged report's
        self.undo: list[Any] = []
        self.in_evaluation = False  # inside an evaluation's forward of a trained root
        # The hooks' bodies, run by the monitor's ``safely``: should the monitor's own code
        # fail, monitoring stops and the script goes on as python would run it.
        monitor.goes_on = "the script goes on"
        self.step_end = functools.partial(monitor.safely, self._step_end)
        self.step_begins = functools.partial(monitor.safely, self._step_begins)
        self.discover = functools.partial(monitor.safely, self._discover)
        self.root_pre_hook = hooks.ModelHook(monitor.safely, self._root_pre_hook)
        self.root_hook = hooks.ModelHook(monitor.safely, self._root_hook)
        self.note_backward = functools.partial(monitor.safely, self._note_backward)
        self.updates.on_grad = functools.partial(monitor.safely, self._note_grad)
        self.updates.losses_since = monitor.losses_since
        # A step by hand ends before the next batch is drawn, so its loading is data time.
        monitor.loaders.on_draw = functools.partial(monitor.safely, self._hand_step)

    def install(self) -> None:
        self.discovery = torch.nn.modules.module.register_module_forward_pre_hook(self.discover)
        if self.prints is None:  # (one of several processes already reports to its launcher)
            m = self.monitor
            self.forks = forks.Forks(m.every, m.mode, m.source_files)
            multiprocessing.util.register_after_fork(self, Doctor._forked)
        # Off once updates by hand are over (``_step_end``).
        self.begins_handle = register_optimizer_step_pre_hook(self.step_begins)
        self.handles.append(self.begins_handle)
        self.handles.append(register_optimizer_step_post_hook(self.step_end))
        original = torch.autograd.backward
        # torch caches functions it finds in its namespace; a weak reference keeps such a cache
        # from holding this doctor, its monitor and the script's models after the run.
        doctor = weakref.ref(self)

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if script.stopping is not None:  # a SIGTERM the script swallowed: see there
                raise SystemExit(script.stopping)
            if profile.in_backward():
                # Called by a backward, as reentrant activation checkpointing's recomputation
                # does, once a checkpoint: a part of the script's backward, not a loss of its
                # own (the recomputed block's outputs were read as the step's loss).
                return original(tensors, *args, **kwargs)
            me = doctor()
            if me is not None:
                me.note_backward(tensors, args, kwargs)
            result = original(tensors, *args, **kwargs)
            if me is not None and me.updates.reading:  # probes on FSDP's parameters
                me.monitor.safely(me.updates.backward_returned)
            if me is not None and me.hand is not None:
                me.monitor.safely(me.hand.backward_done)
            if me is not None and me.ended_in_backward:
                me.monitor.safely(me._backward_returned)
            return result

        self.undo.append(wrap.install_wrapper(torch.autograd, "backward", original, backward))
        original_step = vars(GradScaler)["step"]

        def step(
            scaler: GradScaler, optimizer: torch.optim.Optimizer, *args: Any, **kw: Any
        ) -> Any:
            me = doctor()
            calls = me.step_calls if me is not None else 0
            result = original_step(scaler, optimizer, *args, **kw)
            if me is not None and me.step_calls == calls:  # skipped for an overflow: a step
                me.step_end(optimizer, args, kw)
            return result

        self.undo.append(wrap.install_wrapper(GradScaler, "step", original_step, step))
        process_class = multiprocessing.process.BaseProcess
        original_start = vars(process_class)["start"]

        def start(process: multiprocessing.process.BaseProcess) -> None:
            me = doctor()
            watching = me.forks if me is not None else None
            if watching is not None:
                watching.starting(process)
            try:
                original_start(process)
            finally:
                if watching is not None:
                    watching.started(process)

        self.undo.append(wrap.install_wrapper(process_class, "start", original_start, start))
        self.undo.append(hooks.install())
        self.clipping.install()
        self.scaled_steps.install()
        self.updates.install()
        self.seeds.install()
        self.loaded_weights.install()
        self.copies.install()
        self.monitor.install_loss_checks()
        self.monitor.loaders.watch_batches_by_hand()
        wrapped: list[tuple[Any, str, Any]] = [
            (torch.multiprocessing, "spawn", self._note_spawn),
            (torch.optim.Optimizer, "load_state_dict", self._optimiser_loaded),
        ]
        if self.prints is not None and torch.distributed.is_available():
            for owner in (torch.distributed, torch.distributed.distributed_c10d):
                wrapped.append((owner, "new_group", self.prints.note_group))
        for owner, name, note in wrapped:
            undo = wrap.note_function_calls(owner, name, note)
            if undo is not None:
                self.undo.append(undo)
        if (undo := processes.install_spawn_wrap()) is not None:
            self.undo.append(undo)

    def uninstall(self) -> None:
        self.forks = None
        for handle in [*self.handles, *self.root_handles, self.discovery]:
            if handle is not None:
                handle.remove()
        self.handles, self.root_handles, self.discovery = [], [], None
        self.updates.remove_hooks()
        self.dropouts.end()
        self.masks.end()
        self.predictions.end()
        self.clipping.uninstall()
        self.states.unwatch()
        self.tokens.unwatch()
        self.scaled_steps.uninstall()
        self.metric_resets.uninstall()
        self.updates.uninstall()
        self.seeds.uninstall()
        self.loaded_weights.uninstall()
        self.copies.uninstall()
        while self.undo:
            self.undo.pop()()
        self.monitor.uninstall()

    def _forked(self) -> None:
        """In a process multiprocessing forked: the first to step prints its findings as they
        come, the others keep quiet, and each reports as it exits (after ``run()``) if it
        trained."""
        if self.forks is None or self.forks.readied == os.getpid():  # after the run; or twice
            return
        self.forks.readied = os.getpid()
        self.forks.steps_before = self.monitor.steps_before = self.monitor.step
        self.monitor.findings = {}  # its own are made again, said as its own
        self.forks.ready(self.monitor.stream)
        self.monitor.stream = io.StringIO()
        self.monitor.summary = False
        self.monitor.json_path = self.monitor.plot_path = None
        multiprocessing.util.Finalize(None, self._report_fork, exitpriority=0)
        # os._exit skips the Finalize: the report first (once: it takes the doctor out)
        self.forks.exiting.enter_context(script.before_os_exit(self._report_fork))
        process = multiprocessing.current_process()
        process.run = forks.forked_run(process.run, self.forks)  # type: ignore[method-assign]

    def _report_fork(self) -> None:
        forks = self.forks
        if forks is None:
            return
        try:
            if self.monitor.step == forks.steps_before:  # trained nothing (a loader's worker)
                return
            self.uninstall()
            forks.report(self.finish())
        except Exception as e:  # the process's own exit stands
            print(f"treeqa doctor: a child process's report failed: {e!r}", file=sys.stderr)
        finally:
            forks.release_sigterm()

    def _note_spawn(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``torch.multiprocessing.spawn(fn, ...)``: each process it starts runs ``fn`` under a
        doctor of its own, and the end of the script reports them all. A forked process would
        inherit this doctor's hooks, and is left alone."""
        if kwargs.get("start_method", args[5] if len(args) > 5 else "spawn") == "fork":
            return None
        if self.spawned is None:  # the report is theirs, merged at the script's end
            m = self.monitor
            json_path, plot_path = m.json_path, m.plot_path
            self.reports_to = (
                Path(json_path) if json_path else None,
                Path(plot_path) if plot_path else None,
            )
            m.json_path = m.plot_path = None
            m.summary = False
            self.spawned = Path(tempfile.mkdtemp(prefix="treeqa-doctor-"))
        folder = self.spawned

        def watched(fn: Any) -> processes.Watched:
            return processes.Watched(fn, folder, self.monitor.every, self.monitor.mode)

        if "fn" in kwargs:
            return args, {**kwargs, "fn": watched(kwargs["fn"])}
        return (watched(args[0]), *args[1:]), kwargs

    def _note_backward(self, tensors: Any, args: Any, kwargs: Any) -> None:
        """``torch.autograd.backward(tensors, *args, **kwargs)`` is about to run."""
        loss = _first(tensors)
        if self.updates.penalties.mode is not None:  # what a penalty is added to is made now
            self.updates.penalties.stop(loss if isinstance(loss, torch.Tensor) else None)
        if self.hand is not None:  # (checked here too: a call less on every backward)
            self._hand_step()
        if isinstance(loss, torch.Tensor) and not loss.requires_grad:
            return  # torch raises (it does not require grad): no gradient is taken
        if self.hand is not None:
            self.hand.backward(loss)
        retain = kwargs.get("retain_graph", args[1] if len(args) > 1 else None)
        # (A scalar leaf too: a loss computed under no_grad and then made to require grad,
        # ``step-without-gradients``, whose value is still the step's loss.)
        if isinstance(loss, torch.Tensor) and (loss.grad_fn is not None or loss.numel() == 1):
            self.loss = loss
            if loss.numel() == 1:
                self._add_to_total(loss, bool(retain))
        if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
            self.updates.unused_graphs(loss, self.roots)
            if self.monitor.loss_check.zeroed_open:
                self.monitor.loss_check.note_zeroed(loss)
            if self.updates.returned.pending:
                self.updates.returned.backward(tensors)
            if self.monitor.sampling:
                self.monitor.loss_check.backward(loss)
                self.overlaps.backward(loss)
            if self.monitor.sampling and not self.broadcast_found:
                pair = loss_inputs.broadcast_difference(loss)
                if pair is not None:
                    self.broadcast_found = True
                    found = loss_inputs.loss_broadcast_by_hand(*pair)
                    found.where = sites.user_site()
                    self.monitor.add(found)
            if self.updates.mode & 4:  # a sampled step under float16 autocast: scaled by hand?
                gradient = kwargs.get("grad_tensors", args[0] if args else None)
                self.monitor.scalers.note_backward(loss, gradient)
        if self.scaled_steps.handle is not None:  # (a loss scaler has scaled a loss)
            self.scaled_steps.backward(tensors)
        self.updates.backwards += 1
        self.updates.gradients_taken()
        if self.updates.reading:
            self.updates.backward_called()
        # create_graph retains the graph too, for a second-order step taken within this step
        # (Hessian-vector products): not the retain_graph=True that silences a state's graph.
        self.monitor.note_backward(bool(retain))

    def _add_to_total(self, loss: torch.Tensor, retained: bool) -> None:
        """A scalar given to a backward: kept for the step's loss, its factor noted (read
        before the backward frees it; ~1 us for a loss not scaled)."""
        self.loss_scales.append(loss_inputs.unscaled(loss)[1])
        self.loss_values.append(loss.detach())
        self.loss_retained.append(retained)

    def _take_loss(
        self, reevaluated: bool = False, alone: bool = True
    ) -> tuple[torch.Tensor | None, tuple[torch.Tensor, int] | None]:
        """The step's loss (its last backward's), and where that is not the step's loss, the
        monitor's ``value_of``: (the sum of its backward losses, their count n) where the step
        accumulated gradients over n micro-batches, each loss divided by the same constant
        (by n: the sum is the mean of the micro-batches', which a script prints, not the last
        one's 1/n; by the step's count of tokens, as the transformers ``Trainer`` divides a
        causal LM's summed cross-entropy: the mean over the step's tokens), or where each
        backward but the last kept its graph for the next with no other optimiser stepping
        (``alone``: a reconstruction's backward with ``retain_graph=True``, then its sparsity
        penalty's through the same graph, read as the penalty alone); (the first, 1) where the
        clock ``reevaluated`` its closure (LBFGS evaluates it several times as it moves the
        weights, and its step returns the first: the last was the next step's loss; not any
        step given a closure: Lightning hands every step one, which runs the last
        micro-batch's backward only, or none under manual optimisation). Other steps with
        several backwards (a GAN's two models, SAM's two passes) keep the last's."""
        loss, values, scales, retained = (
            self.loss,
            self.loss_values,
            self.loss_scales,
            self.loss_retained,
        )
        self.loss, self.loss_of_weights = None, False
        self.loss_values, self.loss_scales, self.loss_retained = [], [], []
        n = len(scales)
        if n < 2:
            return loss, None
        if reevaluated:
            return loss, (values[0], 1)
        divided = scales[0] < 1 and all(abs(s / scales[0] - 1) < 1e-6 for s in scales)
        if not divided and not (alone and all(retained[:-1])):  # not chained by retain_graph
            return loss, None
        return loss, (functools.reduce(operator.add, values), n)

    def _note_grad(self, outputs: Any, inputs: Any) -> None:
        """``torch.autograd.grad(outputs, inputs, ...)`` is about to run: gradients a script
        may apply by hand (``p -= lr * g``), as after a backward. The step's loss, seen no
        other way, is the first scalar output taken, or the first taken with respect to
        parameters after one that was not (a physics-informed loss takes du/dx of
        ``u.sum()`` first, then its own gradient with respect to the weights)."""
        loss = _first(outputs)
        if self.hand is None or checks.untraceable(loss):  # torch.func's grad calls it too
            return
        self._hand_step()
        self.hand.backward(loss)
        scalar = loss is not None and loss.numel() == 1 and loss.grad_fn is not None
        if not (self.hand.watched and scalar):
            return
        of_weights = any(isinstance(t, nn.Parameter) for t in loss_inputs.given_tensors(inputs))
        if self.loss is None or (of_weights and not self.loss_of_weights):
            self.loss, self.loss_of_weights = loss, of_weights

    def _hand_step(self) -> None:
        """The weights moved since the last backward, by the script's hand: a step ends."""
        if self.hand is not None and self.hand.noted is not None and self.hand.moved():
            assert self.hand.optimizer is not None
            self._step_end(self.hand.optimizer, (), {})

    def _begin(self, by_forward: bool = True) -> None:
        if by_forward:
            self.begun_by_forward = True
        if not self.open:
            self.open = True
            self.compute_start = time.perf_counter()
            self.monitor.begin_step()
            # The probes' hooks are on parameters, outside a compiled graph: Dynamo neither
            # guards on them nor recompiles, so a compiled model's gradients are probed too.
            self.updates.begin_step(self.monitor.sampling)

    def _discover(self, module: nn.Module, args: Any) -> None:
        # Inside torch.compile's trace a hook's side effects cannot be traced (Dynamo asserts):
        # skip them there. is_compiling() is a constant to Dynamo, so the hook adds nothing to
        # the compiled graph and no graph break; the compiled module's own call runs it eagerly.
        if torch.compiler.is_compiling():
            return
        if self.discovery is not None and compiled_module(module):
            # A compiled model compiles its graph on this call under the global hooks there
            # now, and Dynamo guards on them: the every-module hook goes now, and no sampled
            # step adds one (``monitor.compiling``), so none of them compiles it again.
            self.monitor.compiling = True
            self._drop_discovery()
        self._hand_step()
        # Until the clock's first step every module call is seen, to find the models trained.
        if id(module) not in self.called:
            self.called[id(module)] = module
            self.resumes.pretrained(module)
        if torch.is_grad_enabled():  # the batch drawn last trains (``Loaders.fed_dataset``)
            self.monitor.loaders.fed_dataset = self.monitor.loaders.drawn_dataset
        elif not module.training:  # an evaluation, it may be
            self.evaluated_early.add(id(module))
            self.monitor.loaders.evaluated(early=True)
        if not self._evaluating(module):
            self._begin()

    def _batch_rows(self) -> int | None:
        """The rows of the batch drawn last: its dataset indices, where a sampled step noted
        them, else its DataLoader's batch size (None: no DataLoader)."""
        loaders = self.monitor.loaders
        drawn = loaders.drawn_pass
        indices = drawn.indices if drawn is not None else None
        return len(indices) if indices is not None else loaders.batch_size

    def _epoch(self) -> tuple[Any, Any]:
        """(the training pass: the DataLoader pass of the latest training batch or, with
        batches sliced by hand, the step of the latest evaluation; the dataset of the latest
        batch drawn, None where no DataLoader gave it)."""
        loaders = self.monitor.loaders
        trained = loaders.trained_pass
        drawn = loaders.drawn_pass
        data = drawn.dataset if drawn is not None else None
        return (trained if trained is not None else ("evaluated at", self.evaluated_at)), data

    def _loader_made(self, loader: Any) -> None:
        self.splits.made(loader)
        self.metric_resets.look()
        self.changed.loader_made(loader)

    def _evaluating(self, module: nn.Module) -> bool:
        """A model the clock trains, run in eval mode without gradients: an evaluation between
        steps (``model.eval()`` under ``no_grad``/``inference_mode``), not the next step's
        compute. A frozen teacher is no model the clock trains, and its forward is compute."""
        return id(module) in self.trained and not module.training and not torch.is_grad_enabled()

    def _root_pre_hook(self, module: nn.Module, args: Any, kwargs: Any = None) -> None:
        # No kwargs: torch read the module's hooks before running them, and the every-module
        # hook ahead of this one ended a step by hand, which hooks the models anew: this is
        # the handle just removed, called as a hook without kwargs. It stands for the new one.
        if torch.compiler.is_compiling():  # see _discover
            return
        if self.hand is not None:
            self._hand_step()
        if self._evaluating(module):
            self.dropouts.begin(module)
            self.updates.evaluation()
            self._note_evaluation()
            self._note_scored(args, kwargs)
            self.in_evaluation = True  # (the wrapped module's own hook then counts nothing)
        else:
            self._begin()  # (first: the step's forwards are noted as sampled or not)
            if not torch.is_grad_enabled() and id(module) in self.trained:
                self.evaluated_at = self.monitor.step
                self.monitor.loaders.evaluated()  # (an evaluation that never called eval())
                self._note_scored(args, kwargs)
        if id(module) in self.trained:
            grad = torch.is_grad_enabled()
            if grad:  # the batch drawn last trains (``Loaders.fed_dataset``)
                loaders = self.monitor.loaders
                loaders.fed_dataset = loaders.drawn_dataset
            scoring = self.predictions
            if scoring.open or scoring.thresholds.open:  # (the last output's scoring is over)
                scoring.begin()
            self.monitor.input_elements += _elements(args, kwargs)
            self.updates.forward(module, args)
            sampling, training = self.monitor.sampling, module.training and grad
            if self.splits.pending is not None:  # (the first forward of a loader's pass)
                self.splits.forward(training)
            if sampling or self.heldout.evaluated or not training:
                self.heldout.forward(args, kwargs, training, sampling, self.monitor.step)
                if sampling or not training:
                    self.scales.forward(module, args, kwargs, training, self.monitor.step)
            if sampling and training:
                self.monitor.loss_check.leaks.forward(args, kwargs, self.monitor.step)
                inputs = given(args, kwargs)
                self.monitor.loss_check.twice.forward(inputs)
                self.mixed.forward(module, args, kwargs or {})
                kept = self.monitor.loaders.drawn_batches.kept
                drawn = [(_dataset(k.drawn_from), k.indices) for k in kept]
                self.changed.forward(inputs, drawn, self.monitor.step)
                self.labels.training(inputs)
                if not (self.monitor.compiling or compiled()):  # (wrappers a compiled graph
                    self.masks.begin(module, args, kwargs)  # would guard on)
                    self.dropouts.begin(module, training=True)
            if self.prints is not None:
                self.prints.forward((*args, kwargs), self.monitor.sampling)  # model(**batch)
        elif self.monitor.sampling:  # a teacher's forward, say: is it in eval mode?
            self.updates.teachers.forward(module)

    def _note_evaluation(self) -> None:
        """An evaluation's forward: from a loader that drops its last batch? For the processes
        side by side: over which loader's share?"""
        self.evaluated_at = self.monitor.step
        self.monitor.loaders.evaluated()
        if self.prints is not None:
            loaders = self.monitor.loaders
            fresh = loaders.made > 0  # an iterator made since the last step: the evaluation's
            shard = loaders.shard if fresh else 1
            self.prints.evaluation(self.monitor.step, shard, loaders.shard_where)

    def _note_scored(self, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
        """An evaluation's forward: which data its predictions score."""
        self.copies.model_scored(args, kwargs)
        inputs = given(args, kwargs)
        self.changed.forward(inputs, [])
        if not self.labels.said:
            first = next(iter(inputs), None)
            loaders = self.monitor.loaders
            newest = loaders.newest() if loaders.newest is not None else None
            drawn_from = loaders.iterators.get(newest) if newest is not None else None
            data = drawn_from.dataset if drawn_from is not None else id(newest)
            self.labels.evaluating(first, loaders.drawn_batches.draws, data)

    def _optimised(self) -> set[int]:
        """The ids of the parameters of every optimiser that stepped."""
        return {id(p) for o in self.stepped for g in o.param_groups for p in g["params"]}

    def _inner_pre_hook(self, module: nn.Module, args: Any) -> None:
        """The module inside a ``DistributedDataParallel`` run alone (``model.module(x)``): an
        evaluation on one process must not go through the wrapper, which syncs buffers."""
        if not module.training and not torch.is_grad_enabled() and not self.in_evaluation:
            self._note_evaluation()

    def _root_hook(self, module: nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling():  # see _discover
            return
        # The wait for the next step's data starts when an evaluation's last forward ends.
        if self._evaluating(module):
            self.dropouts.end()
            self.changed.forward_done()
            self.in_evaluation = False
            if not (self.monitor.compiling or compiled()):  # (wrappers a graph would guard on)
                self.predictions.done(output, True, id(module))
            if not self.open:
                self.last_end = time.perf_counter()
        elif self.updates.sampled and id(module) in self.trained:  # (all it reads is sampled)
            self.updates.forward_done(module, output)
            self.overlaps.forward_done(output, self.monitor.step)
            self.changed.forward_done()
            if not (self.monitor.compiling or compiled()):
                self.predictions.done(output, not torch.is_grad_enabled(), id(module))
            self.masks.end()
            self.dropouts.end()
        elif not torch.is_grad_enabled() and id(module) in self.trained:  # an evaluation that
            if not (self.monitor.compiling or compiled()):  # never called model.eval()
                self.predictions.done(output, True, id(module))

    def _hook_tops(self, tops: Sequence[nn.Module]) -> None:
        """A step's compute starts at the first forward of any model, trained by the clock or
        not: a frozen teacher, or the other half of a GAN that steps after the clock, is
        compute, not waiting for data. Modules without parameters (transforms in a Dataset)
        may run while loading data and do not start it."""
        for top in tops:
            if isinstance(top, torch.jit.ScriptModule):  # takes no Python hooks: as functional
                continue
            if id(top) not in self.hooked and next(top.parameters(), None) is not None:
                self.hooked.add(id(top))
                self.root_handles.append(
                    top.register_forward_pre_hook(self.root_pre_hook, with_kwargs=True)
                )
                self.root_handles.append(top.register_forward_hook(self.root_hook))

    def _hook_late_tops(self) -> None:
        """The clock's second step: hook the models first run since its first, then drop the
        every-module hook."""
        inner = {id(c) for m in self.called.values() for c in m.modules() if c is not m}
        self._hook_tops([m for i, m in self.called.items() if i not in inner])
        self._drop_discovery()
        self.called.clear()
        self.evaluated_early.clear()

    def _look_again(self) -> None:
        """A step with a backward that no hooked model began: a model first run after the
        clock's second step trains (a student distilled from the model trained before it).
        The every-module hook is back for one step, whose models then begin steps (once a
        clock: a script whose steps run no model, beside one that does, pays it once)."""
        if self.looked_again or self.discovery is not None or compiled():
            return
        self.looked_again = self.late_tops = True
        self.called.clear()
        self.discovery = torch.nn.modules.module.register_module_forward_pre_hook(self.discover)

    def _drop_discovery(self) -> None:
        """Remove the every-module hook: models are looked up no more (no cost from now on)."""
        if self.discovery is not None:
            self.discovery.remove()
            self.discovery = None
        self.late_tops = False

    def _find_roots(self, optimizer: torch.optim.Optimizer) -> None:
        trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self.clock_params = trained
        inner = {id(c) for m in self.called.values() for c in m.modules() if c is not m}
        tops = [m for i, m in self.called.items() if i not in inner]
        self.roots = [m for m in tops if any(id(p) in trained for p in m.parameters())]
        trained_roots = {id(m) for m in self.roots}
        same_models = bool(trained_roots) and trained_roots == self.trained_before
        if self.trained_before and not same_models:  # a second run: its first steps sampled
            self.monitor.steps_before = self.monitor.step
        self.trained = trained_roots
        # The every-module hook stays one more step of the clock: a model first run after the
        # clock's first step (a second model with its own optimiser) is found then. Not in a
        # compiled script: Dynamo guards on the global hooks, and each change recompiles.
        self.late_tops = self.discovery is not None and not compiled()
        if not self.late_tops:
            self._drop_discovery()
        while self.root_handles:
            self.root_handles.pop().remove()
        self.hooked.clear()
        self._hook_tops(tops)
        for top in tops:
            wrapped = getattr(top, "module", None)  # DistributedDataParallel's
            if (
                self.prints is not None
                and id(top) in trained_roots
                and isinstance(wrapped, nn.Module)
            ):
                hook = hooks.ModelHook(self.monitor.safely, self._inner_pre_hook)
                self.root_handles.append(wrapped.register_forward_pre_hook(hook))
        self.monitor.unwatch()
        self.monitor.watch(
            *self.roots, trained=[p for group in optimizer.param_groups for p in group["params"]]
        )
        self.states.watch(self.roots)
        self.tokens.watch(self.roots)
        self.metric_resets.look()
        self.called.clear()
        self.finding_roots = False
        self.updates.reset(self.monitor.step, same_models)
        self.updates.watch_modes(self.roots)
        self.updates.orphans.frozen_beside([m for m in tops if id(m) not in trained_roots])
        # An evaluation of the models before this clock's first step (a baseline score).
        early = any(id(m) in self.evaluated_early for m in self.roots)
        if early:
            self.updates.evaluated = True
        self.monitor.loaders.first_step(early)
        self.evaluated_early.clear()
        self.clipping.reset(optimizer)

    def _shuffled(self, latest: bool) -> bool:
        """The latest training batches came from a loader that draws at random (``latest``:
        and so did the latest batch drawn, an evaluation's)."""
        loaders = self.monitor.loaders
        passes = (loaders.trained_pass, loaders.drawn_pass) if latest else (loaders.trained_pass,)
        return all(p is not None and p.shuffled for p in passes)

    def _made_anew(self, optimizer: torch.optim.Optimizer) -> bool:
        """``optimizer`` steps for the first time, after a backward since the clock's last
        step, and holds exactly the clock's parameters: the script made a new optimiser for
        the run (``opt = Adam(model.parameters())`` inside the loop, or once an epoch), not a
        second run. A wrapper stepping its inner optimiser (Lookahead) steps with no backward
        between the two."""
        if optimizer in self.stepped or not self.updates.backwards or not self.clock_params:
            return False
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        return held == self.clock_params

    def _set_clock(self, optimizer: torch.optim.Optimizer) -> None:
        self.clock = weakref.ref(optimizer)
        self.monitor.inputs.features.lbfgs = isinstance(optimizer, torch.optim.LBFGS)
        self.clock_by_hand = isinstance(optimizer, hand.HandUpdates)

    def _adopt(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """A new optimiser of the same run becomes the clock, its models and state kept."""
        self._set_clock(optimizer)
        self.stepped.add(optimizer)
        self.clipping.reset(optimizer)
        self.heldout.new_optimiser(self.monitor.step)
        self.remade += 1
        if self.remade == REMADE_STEPS and _has_moments(optimizer):
            found = slips.optimiser_made_every_step(type(optimizer).__name__, self.remade)
            found.where = sites.user_site()
            self.monitor.add(found)
        return optimizer

    def _switch_clock(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer`` is the clock from now on; its next step looks up the models it trains
        (the every-module hook is back until then); this one is counted only when the clock before
        was freed (``_count_step``)."""
        self._set_clock(optimizer)
        self.heldout.reset()
        self.splits.reset()
        self.others.clear()
        self.most_between = 0
        self.finding_roots = True
        self.looked_again = False
        self.trained_before, self.trained = self.trained, set()
        if self.discovery is None:
            self.discovery = torch.nn.modules.module.register_module_forward_pre_hook(self.discover)
        self.called.clear()
        # A step the monitor has begun stays open (its begin is not repeated) but starts now.
        self.last_end = time.perf_counter()
        if self.open:
            self.compute_start = self.last_end

    def _backward_returned(self) -> None:
        """The backward that the clock stepped inside has returned: the wait for the next
        step's data starts now, and a profiler window stops here."""
        self.ended_in_backward = False
        if not self.open:
            self.last_end = time.perf_counter()
        self.monitor.backward_returned()

    def _count_step(self) -> None:
        """The step of an optimiser that takes over from a freed clock (a loop in a function
        called again, a Pool's worker given its next task): a step of the run, whose models are
        looked up at the next one, so only the monitor counts it."""
        now = time.perf_counter()
        if not self.open:  # (the new run's models are not hooked yet)
            self.compute_start = self.last_end
        loss, value_of = self._take_loss()
        carried, self.carried = self.carried, 0.0
        self.monitor.end_step(
            loss,
            now - self.compute_start + carried,
            self.compute_start - self.last_end,
            value_of,
        )
        self.open = False

    def _optimiser_loaded(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``Optimizer.load_state_dict(optimizer, state_dict)`` before the script's first step
        (its forward included): a run resumed from a checkpoint, numbered on from the steps its
        state holds (Adam's ``step``), as the script numbers them. None there (plain SGD), or a
        step taken already: numbered from 1."""
        state = args[1] if len(args) > 1 else kwargs.get("state_dict")
        self.resumes.optimiser_loaded(args[0], state)
        self.updates.rates.writes.loaded(args[0])  # (a copy of its groups edited and loaded)
        if self.monitor.step or self.monitor.in_step or self.open:
            return
        steps = resumes.steps_taken(state)
        if steps > 0:
            self.monitor.resume_at(steps)

    def _count_taken(self, n: int) -> None:
        """The ``n`` steps an optimiser took while the clock, still alive, stepped no more,
        before it took over (the script's second run: fine-tuning with a new optimiser after
        pre-training): steps of the run, counted now, each with its backward's loss where
        each had one, timed as their mean. Left out, they were missing from the series and
        every later step read ``n`` behind the script's count."""
        now = time.perf_counter()
        start = self.compute_start if self.open else self.last_end
        values: list[torch.Tensor | None] = list(self.loss_values)
        self._take_loss()
        losses = values if len(values) == n else [None] * n
        carried, self.carried = self.carried, 0.0
        for loss in losses:
            self.monitor.end_step(loss, (now - start + carried) / n)
        self.open = False
        self.last_end = now

    def _said_error(self) -> str:
        """Where strict mode's stop points for the error finding: above, where it was printed;
        a quiet child process printed nothing, and names it."""
        if not isinstance(self.monitor.stream, io.StringIO):
            return "see above"
        errors = [f for f in self.monitor.findings.values() if f.severity == "error"]
        return f"{errors[0].code}: {errors[0].message}" if errors else "see its report"

    def _step_begins(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """An optimiser's step starts: the weights are its to update from now on. LBFGS moves
        them between the backwards of the closure its step runs (up to ``max_iter`` of them),
        which would read as that many updates by hand inside its first step. SAM moves the
        weights uphill (read as a step by hand) and puts them back as its optimiser's first step
        begins: that move is no second step, and the optimiser's step is the one read there."""
        if self.hand is not None:
            if self.hand.went_uphill() and self.hand.noted is not None and self.hand.moved():
                self.put_back = True
            else:
                self._hand_step()  # (weights moved by hand since the last backward: that step)
            self.hand = self.monitor.loaders.on_draw = None

    def _step_end(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.step_calls += 1
        by_hand = isinstance(optimizer, hand.HandUpdates)
        put_back, self.put_back = self.put_back, False  # (SAM: no new optimiser of the run)
        if self.hand is not None and not by_hand:  # the script's updates are an optimiser's
            self.hand = self.monitor.loaders.on_draw = None
        if self.hand is None and self.begins_handle is not None:  # (not inside the pre-hooks)
            self.begins_handle.remove()  # no update by hand to end: a hook less on every step
            self.begins_handle = None
        if self.forks is not None and not self.forks.stepped and self.forks.first_step():
            quiet, self.monitor.stream = self.monitor.stream, self.forks.stream
            if isinstance(quiet, io.StringIO):  # the findings of its first step
                print(quiet.getvalue(), end="", file=self.monitor.stream, flush=True)
        if self.resumes.watching and not by_hand:
            self.resumes.stepped(optimizer, self.monitor.step + 1, optimizer in self.stepped)
        if self.monitor.detached.pending:  # (a call a step less)
            self.monitor.detached.stepped()
        clock = self.clock() if self.clock is not None else None
        # The last run's optimiser is gone. (Updates by hand gone are not: weights moved by
        # another process of a shared model, hogwild, read as one step of them, counted.)
        freed = clock is None and self.clock is not None and not self.clock_by_hand
        if clock is None and self.clock is None:  # the first step of the run
            self._set_clock(optimizer)
            clock = optimizer
            self.stepped.add(optimizer)
        if isinstance(clock, hand.HandUpdates) and not by_hand:
            clock = None  # updates by hand are over: the optimiser takes over at once
        if optimizer is not clock and not put_back and self._made_anew(optimizer):
            self.replaced = weakref.ref(clock) if clock is not None else None
            self.replaced_at = self.monitor.step  # (the steps counted, most of them its)
            clock = self._adopt(optimizer)
        elif optimizer is clock:
            self.remade = 0
        elif self.replaced is not None and self.replaced() is optimizer:
            # The optimiser a new one was taken to replace steps again: both step the same
            # parameters, each its own objective (one every few steps). The one that stepped
            # more is the clock: the first, if it stepped more before the new one's first step
            # than the new one has since.
            if self.replaced_at > self.monitor.step - self.replaced_at:
                self._set_clock(optimizer)
                clock, self.remade = optimizer, 0
            self.replaced = None
        # (the clock is in ``stepped`` since it became the clock: not added on every step)
        if optimizer is not clock:
            self.stepped.add(optimizer)
            self.updates.optimizers.add(optimizer)
            n = self.others[optimizer] = self.others.get(optimizer, 0) + 1
            # A clock freed (its run's function returned, ``opt`` rebound) steps no more.
            if clock is None or n > max(SWITCH_AFTER, 4 * self.most_between):
                if freed:  # nothing else steps: this is the next run's first step, counted
                    self._count_step()
                elif clock is not None:
                    self._count_taken(n)
                self._switch_clock(optimizer)
            else:
                self.updates.other_step(optimizer)
                if not self.open:  # after the clock's step: compute, not a wait for data
                    now = time.perf_counter()
                    self.carried += now - self.last_end
                    self.last_end = now
            return
        alone = not self.others  # no other optimiser stepped since the clock's last step
        if self.others:
            self.most_between = max(self.most_between, *self.others.values())
            self.others.clear()
        if self.finding_roots:
            self._find_roots(optimizer)
        elif self.late_tops:
            self._hook_late_tops()
        now = time.perf_counter()
        begun, self.begun_by_forward = self.begun_by_forward, False
        if not begun and self.hooked and self.updates.backwards:
            self._look_again()
        # No model's forward begins this script's steps (its model is raw tensors): each step
        # is opened at the end of the one before, so that it can be sampled. So too where the
        # models hooked run no more (a teacher that labelled the data once) and a second look
        # for models found none to begin this step.
        functional = not begun and (not self.hooked or self.looked_again)
        if not self.open:  # no module forward seen this step (functional model)
            self.compute_start = self.last_end
        loss, value_of = self._take_loss(isinstance(optimizer, torch.optim.LBFGS), alone)
        carried, self.carried = self.carried, 0.0
        sampled = self.monitor.sampling
        self.monitor.end_step(
            loss,
            now - self.compute_start + carried,
            self.compute_start - self.last_end,
            value_of,
        )
        self.clipping.end_step()
        if sampled:
            # (not while copies are watched: the check's own copy is none of the script's)
            ready = self.discovery is None and self.monitor.step > copies.MADE_BY
            self.mixed.stepped(ready and not compiled())
            self.overlaps.end_step()
            self.heldout.stepped(self.monitor.step, optimizer)
            self.monitor.loss_check.twice.stepped(optimizer)
            if not isinstance(optimizer, hand.HandUpdates):
                self.rounding.stepped(self.monitor.step, optimizer, self.monitor.params)
        if self.monitor.loss_check.minimised is not None:
            found = self.monitor.loss_check.take_minimised(optimizer)
            if found is not None:
                self.monitor.add(found)
        self.updates.end_step(
            self.monitor.step,
            sampled,
            optimizer,
            self.roots,
            self.monitor.params,
            loss is not None,
            loss,
        )
        self.monitor.loaders.end_step()
        if self.labels.confusions:  # (an evaluation since the last step)
            self.labels.judge()
        self.seeds.end_step()
        if self.states.handles:  # (the trained models have recurrent layers)
            self.states.end_step()
        if self.prints is not None:
            params = (p for group in optimizer.param_groups for p in group["params"])
            self.prints.end_step(self.monitor.step, sampled, self.roots, params)
        self.open = False
        self.last_end = time.perf_counter()
        # An optimiser stepped by a gradient hook (the step fused into the backward, as
        # PyTorch's tutorial does it): the rest of that backward is no wait for data.
        self.ended_in_backward = profile.in_backward()
        if functional:
            self._begin(by_forward=False)
        if self.monitor.stop_requested:
            raise HealthError(f"strict mode: stopping on an error finding ({self._said_error()})")

    def finish(self) -> dict[str, Any]:
        """The monitor's final checks, summary and report files; the report."""
        monitor = self.monitor
        try:
            if not monitor.failed:
                with contextlib.suppress(HealthError):  # strict mode: the script is over
                    monitor.safely(self._hand_step)  # the last update by hand
                monitor.in_step = False  # its findings are the last step's (_final_checks)
                self.updates.finish(monitor.step, self.roots)
                for found in monitor.loss_check.take_run_end():
                    monitor.add(found)
                self.heldout.judge(monitor.step)
                self.scales.judge(monitor.step)
                self.rounding.judge()
                self.masks.finish()
                monitor.loaders.judge_dropped()
                self.labels.judge()
                self.resumes.say_unmatched()
                monitor.maximize = self.updates.rates.maximize
                monitor.maximize_weights = self.updates.rates.maximize_weights
            if monitor.step == 0:  # backward calls with no optimiser step: say so in the summary
                monitor.unstepped_backwards = self.updates.backwards
            return monitor.finish()
        except OSError as e:  # the report could not be written: the script's exit code still holds
            print(f"treeqa doctor: could not write the report: {e}", file=sys.stderr)
            return report.build(monitor)
        except Exception as e:  # the monitor's own failure: the script's exit code still holds
            print(f"treeqa doctor: the report failed ({type(e).__name__}: {e})", file=sys.stderr)
            return {"findings": [], "series": {}, "steps": monitor.step, "meta": {}}


def _elements(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> int:
    """Elements of the tensors a forward is given, as arguments or in a list, tuple or dict
    among them (``model(**batch)``, ``model(batch)``): a measure of the step's work."""
    total = 0
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, dict):
            value = list(value.values())
        items = value if isinstance(value, list | tuple) else (value,)
        total += sum(t.numel() for t in items if isinstance(t, torch.Tensor))
    return total


def _first(tensors: Any) -> torch.Tensor | None:
    """The first tensor given to ``torch.autograd.backward`` or ``grad``: a tensor, or the first
    of a list or tuple. Another iterable (a generator) is left unread, for torch to read whole."""
    if isinstance(tensors, torch.Tensor):
        return tensors
    if isinstance(tensors, list | tuple) and tensors and isinstance(tensors[0], torch.Tensor):
        return tensors[0]
    return None


def _has_moments(optimizer: torch.optim.Optimizer) -> bool:
    """The optimiser keeps per-parameter state across steps (Adam's moments, a momentum
    buffer, Adagrad's sums): what a new optimiser each step throws away. Plain SGD keeps none."""
    return any(
        isinstance(v, torch.Tensor) and v.dim() > 0
        for state in optimizer.state.values()
        for v in state.values()
    )


def _dataset(drawn_from: Any) -> Any:
    """The dataset a pass draws from (held weakly), or None where it is gone."""
    return drawn_from.data() if drawn_from.data is not None else None
