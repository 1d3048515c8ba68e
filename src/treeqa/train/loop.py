"""The one training loop. Every model trains through ``fit()``; extension is by callbacks only."""

from __future__ import annotations

import math
import random
import signal
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from treeqa.config import ConfigError, check_fields
from treeqa.models.common import Output
from treeqa.train import distributed


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 10
    """Passes over the training data."""
    batch_size: int = 25
    """Examples per optimiser step."""
    optim: str = "adagrad"
    """adagrad | adam"""
    lr: float = 0.05
    """Learning rate of every parameter but the word embeddings."""
    emb_lr: float = 0.1
    """Learning rate of the word embeddings; 0 freezes them."""
    emb_optim: str = "same"
    """same | sgd: how the word embeddings step; sgd is plain SGD at emb_lr next to Adagrad
    for the rest, as in Tai et al.'s code."""
    weight_decay: float = 1e-4
    """L2 penalty (added to the gradient by the optimiser) on non-embedding parameters."""
    adam_betas: tuple[float, ...] = (0.9, 0.999)
    adam_eps: float = 1e-8
    warmup_steps: int = 0
    """Steps of inverse-exponential warm-up from 0 to lr (QANet); 0 or 1 = constant lr."""
    clip: float = 0.0
    """Clip the global gradient norm to this value; 0 = no clipping."""
    seed: int = 0
    metric: str = "root_acc"
    """Dev metric (higher is better) that selects the best checkpoint and drives early stopping."""
    patience: int = 0
    """Stop after this many epochs without a better dev metric; 0 = never."""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N"""
    amp: str = "off"
    """off | bf16 | fp16: autocast precision on GPU; fp16 also scales the loss (GradScaler)."""
    health: str = "on"
    """off | on | strict: the training-health monitor (strict stops on an error finding)."""
    log_every: int = 50
    """Steps between metric-log lines."""
    checkpoint_every: int = 0
    """Also write the last checkpoint every this many steps (0 = at epoch ends only)."""
    ema_decay: float = 0.0
    """Evaluate and keep as best an exponential moving average of the weights; 0 = off."""
    compile: str = "off"
    """off | default | reduce-overhead | max-autotune: train through ``torch.compile`` in that
    mode (QANet on a GPU; the tree models' levels run as written-out autograd functions and
    gain nothing)."""

    def __post_init__(self) -> None:
        zero_or_more = ["lr", "emb_lr", "weight_decay", "adam_eps", "warmup_steps", "clip"]
        zero_or_more += ["patience", "checkpoint_every", "ema_decay", "seed"]
        check_fields(
            self,
            "train",
            at_least={
                "epochs": 1,
                "batch_size": 1,
                "log_every": 1,
                **dict.fromkeys(zero_or_more, 0),
            },
            below={"ema_decay": 1, "seed": 2**32},  # torch's seeds are 32-bit
            choices={
                "amp": ("off", "bf16", "fp16"),
                "health": ("off", "on", "strict"),
                "optim": ("adagrad", "adam"),
                "emb_optim": ("same", "sgd"),
                "compile": ("off", "default", "reduce-overhead", "max-autotune"),
            },
        )
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            raise ConfigError(
                f"train.adam_betas: expected two numbers in [0, 1), got {list(self.adam_betas)}"
            )
        if self.emb_optim == "sgd" and self.optim != "adagrad":
            raise ConfigError("train.emb_optim = sgd goes with train.optim = adagrad (Tai et al.)")
        try:  # the name only: whether this machine has the device is asked when it trains
            device_named(self.device)
        except ValueError as err:
            raise ConfigError(f"train.{err}") from None


@dataclass
class TrainState:
    """Where a run is; saved in the last checkpoint so a killed run resumes from it."""

    epoch: int = 0
    step: int = 0
    epoch_step: int = 0
    """Batches done in the current epoch (a run resumed mid-epoch skips them)."""
    best: float = -math.inf
    best_epoch: int = -1
    best_step: int = -1
    best_partial: bool = False
    """The best score was taken part-way through its epoch (a time budget stopped it there;
    the resumed run scores that epoch again at its end)."""
    improved: bool = False
    stop: bool = False
    abort: bool = False
    """A stop for an error (the health monitor in strict mode): the epoch it cuts short is
    neither scored nor checkpointed, so the last checkpoint stays the one before it."""
    interrupted: int = 0
    """The signal (SIGINT, SIGTERM) that stopped the run after a step, or 0: the last
    checkpoint is written at that step, unscored, and ``fit()`` raises ``Interrupted``."""
    history: list[dict[str, float]] = field(default_factory=list)
    loss_sum: torch.Tensor = field(default_factory=lambda: torch.zeros(()))
    """The training loss summed over this epoch's steps, resumed ones included (on the
    model's device: read when an epoch's mean is logged, not every step)."""
    loss_steps: int = 0
    """The steps in ``loss_sum`` (``epoch_step``, but kept once the epoch has ended)."""
    log_sum: torch.Tensor = field(default_factory=lambda: torch.zeros(()))
    log_steps: int = 0
    """The training loss summed over this epoch's steps since the last logged line, and their
    number (``MetricsLog``): saved, so a run resumed part-way through a window logs all of it."""
    scaler: torch.amp.GradScaler | None = None
    """The loss scaler ``fit()`` steps with (enabled under fp16 autocast only)."""
    scaler_state: dict[str, Any] | None = None
    """A resumed run's saved loss-scaler state, which ``fit()`` loads into its scaler."""
    # Per-step timings, for progress and the health monitor (seconds).
    data_time: float = 0.0
    step_time: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "step": self.step,
            "epoch_step": self.epoch_step,
            "best": self.best if math.isfinite(self.best) else None,
            "best_epoch": self.best_epoch,
            "best_step": self.best_step,
            "best_partial": self.best_partial,
            "history": self.history,
            "loss_sum": float(self.loss_sum),
            "loss_steps": self.loss_steps,
            "log_sum": float(self.log_sum),
            "log_steps": self.log_steps,
            "grad_scaler": (
                self.scaler.state_dict()
                if self.scaler is not None and self.scaler.is_enabled()
                else None
            ),
        }

    @property
    def scored_epoch(self) -> int:
        """At an epoch's end, its number from 1; a stop part-way keeps ``epoch`` (epochs done)
        and ``epoch_step`` (batches done) for a resumed run, and scores epoch ``epoch + 1``."""
        return self.epoch + 1 if self.epoch_step else self.epoch

    @property
    def epoch_loss(self) -> float:
        """The mean training loss of this epoch's steps so far."""
        return float(self.loss_sum) / max(self.loss_steps, 1)

    def summary(self) -> dict[str, Any]:
        """What a finished run reports: best dev score and where it was, epochs and steps run."""
        return {
            "best_epoch": self.best_epoch,
            "best_step": self.best_step,
            "best_partial": self.best_partial,
            "best_dev": self.best,
            "epochs": self.epoch,
            "steps": self.step,
            "aborted": self.abort,
            "interrupted": signal.Signals(self.interrupted).name if self.interrupted else None,
        }

    def position(self) -> str:
        """Where in its epochs the run is: "epoch 3, batch 4" part-way, or "the end of
        epoch 2"."""
        if self.epoch_step:
            return f"epoch {self.epoch + 1}, batch {self.epoch_step}"
        return f"the end of epoch {self.epoch}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainState:
        best = data.get("best")
        return cls(
            epoch=data["epoch"],
            step=data["step"],
            epoch_step=data.get("epoch_step", 0),
            best=-math.inf if best is None else best,
            best_epoch=data["best_epoch"],
            best_step=data.get("best_step", -1),
            best_partial=data.get("best_partial", False),
            history=list(data["history"]),
            loss_sum=torch.tensor(float(data.get("loss_sum", 0.0))),
            loss_steps=int(data.get("loss_steps", 0)),
            log_sum=torch.tensor(float(data.get("log_sum", 0.0))),
            log_steps=int(data.get("log_steps", 0)),
            scaler_state=data.get("grad_scaler"),
        )


class Interrupted(KeyboardInterrupt):
    """A signal stopped ``fit()`` after a step, once the callbacks had saved the run there
    (the last checkpoint, for ``--resume``). Still a KeyboardInterrupt, so code that stops on
    Ctrl-C stops on this too."""

    def __init__(self, signum: int, state: TrainState):
        self.signum, self.step = signum, state.step
        self.summary = {**state.summary(), "interrupted": signal.Signals(signum).name}
        """The run's ``TrainState.summary()`` where it stopped, naming the signal."""
        super().__init__(
            f"stopped by {signal.Signals(signum).name} after step {state.step} "
            f"({state.position()}); "
            "the last checkpoint is saved there and --resume goes on from it"
        )


class Batch(Protocol):
    def to(self, device: torch.device) -> Batch: ...


class Callback:
    """Hooks called by ``fit()``; override the ones you need."""

    main_only = False
    """Under torchrun, run on process 0 only (set by callbacks that write files or output)."""

    def on_fit_start(
        self, state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None: ...
    def on_epoch_start(self, state: TrainState) -> None: ...
    def on_batch_start(self, state: TrainState, batch: Any) -> None: ...
    def on_after_backward(self, state: TrainState, model: nn.Module) -> None: ...
    def on_step_end(self, state: TrainState, output: Output, batch: Any) -> None: ...
    def on_eval_start(self, state: TrainState, model: nn.Module) -> None: ...
    def on_eval_end(self, state: TrainState, model: nn.Module) -> None: ...
    def on_epoch_end(self, state: TrainState, metrics: dict[str, float]) -> None: ...
    def on_interrupt(self, state: TrainState) -> None:
        """A signal stopped the run after this step, part-way through an epoch: save it."""

    def on_fit_end(self, state: TrainState) -> None: ...
    def on_teardown(self, state: TrainState) -> None:
        """Called last, however ``fit()`` ends (an exception too): give back what
        ``on_fit_start`` took from the process (signal handlers, say)."""


def device_named(name: str) -> torch.device:
    """The device ``name`` names (not asking whether this machine has it): cpu, cuda or
    cuda:N, which treeqa runs on; auto is taken as cpu here. Else a ValueError."""
    try:
        device = torch.device("cpu" if name == "auto" else name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {name!r}: expected auto, cpu, cuda or cuda:N")
    return device


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's generators, for a run that starts the same way each time."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when there is a device), ``cpu``, ``cuda`` or ``cuda:N``; a name torch does
    not know, or a CUDA device this machine lacks, is a one-line ValueError, not torch's."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = device_named(name)
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        found = torch.cuda.device_count()
        raise ValueError(f"device {name!r}: this machine has {found} CUDA device(s)")
    return device


COMPILE_BACKEND = "inductor"
"""``torch.compile``'s backend for ``train.compile`` (tests use "eager": Dynamo's capture alone)."""
AMP_DEVICES = ("cuda",)
"""Device types ``train.amp`` applies on: on CPU, half-precision autocast slows most machines
down, so it trains in float32 there."""


def _number(name: str, value: Any) -> float | int:
    """An evaluation's metric as a plain number (a one-element tensor or numpy scalar's
    value): the history, the log and the checkpoint keep it."""
    one = isinstance(value, torch.Tensor) and value.numel() == 1
    if one or (type(value).__module__ == "numpy" and getattr(value, "size", 0) == 1):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"evaluate(model)[{name!r}] is {value!r}; fit() takes numbers (one per metric)"
        )
    return value


def autocast(device: torch.device, amp: str) -> Any:
    if amp == "off" or device.type not in AMP_DEVICES:
        return nullcontext()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[amp]
    return torch.autocast(device_type=device.type, dtype=dtype)


def loss_scaler(device: torch.device, amp: str, state: TrainState) -> torch.amp.GradScaler:
    """The loss scaler of a run: float16 gradients underflow to zero without one, so under fp16
    autocast the loss is scaled up before backward, the gradients down before anything reads
    them, and a step whose gradients overflowed is skipped (the scale then halves). Disabled
    (every call passes through) otherwise. A resumed run goes on with its saved scale."""
    enabled = amp == "fp16" and device.type in AMP_DEVICES
    scaler = torch.amp.GradScaler(device.type, enabled=enabled)
    if enabled and state.scaler_state:
        scaler.load_state_dict(state.scaler_state)
    return scaler


def clip_gradients(params: Iterable[nn.Parameter], max_norm: float) -> None:
    """Scale the gradients so their global norm is at most ``max_norm``, as
    ``clip_grad_norm_`` does; it has no kernel for the sparse word-vector gradients, so
    those are coalesced (a row looked up twice holds its gradient twice) and taken apart."""
    with torch.no_grad():
        given = list(params)
        for p in given:
            if p.grad is not None and p.grad.is_sparse:
                p.grad = p.grad.coalesce()
        grads = [p.grad for p in given if p.grad is not None]
        if not any(g.is_sparse for g in grads):
            nn.utils.clip_grad_norm_(given, max_norm)
            return
        norms = [(g.values() if g.is_sparse else g).float().norm() for g in grads]
        scale = (max_norm / (torch.stack(norms).norm() + 1e-6)).clamp(max=1.0)
        for g in grads:
            (g.values() if g.is_sparse else g).mul_(scale.to(g.dtype))


def check_loss(loss: Any) -> torch.Tensor:
    """``loss``, a training step's ``Output.loss``; a TypeError or ValueError unless it is one
    number autograd can step from: else backward fails with torch's words, naming no model."""
    if loss is None:
        raise ValueError("a training batch produced no loss: does it carry labels?")
    if not isinstance(loss, torch.Tensor):
        raise TypeError(
            f"the model's Output.loss is a {type(loss).__name__}; fit() takes a tensor "
            "computed from the model's weights"
        )
    if loss.dim() != 0:
        raise ValueError(
            f"the model's Output.loss has shape {list(loss.shape)}; fit() takes one number "
            "(a loss per example or node reduced by .mean() or .sum())"
        )
    if not loss.requires_grad:
        raise ValueError(
            "the model's Output.loss does not require grad: it was computed apart from the "
            "model's weights (under torch.no_grad(), after .detach() or .item(), or with "
            "every weight frozen)"
        )
    return loss


def check_metric(metric: str, names: Iterable[str]) -> None:
    """A ConfigError unless ``metric`` is one of the dev metrics ``names``: with another, every
    epoch would be "no better" and no best checkpoint would ever be written."""
    names = list(names)
    if metric not in names:
        raise ConfigError(
            f"train.metric: {metric!r} is not a dev metric; choose one of {', '.join(names)}"
        )


def _dev_metrics(
    evaluate: Callable[[nn.Module], dict[str, float]],
    model: nn.Module,
    state: TrainState,
    callbacks: Sequence[Callback],
    world: distributed.World,
) -> dict[str, float]:
    """``evaluate(model)`` as plain numbers, in eval mode between the callbacks'
    ``on_eval_start`` and ``on_eval_end``: process 0 evaluates, and every process gets its
    metrics."""
    for cb in callbacks:
        cb.on_eval_start(state, model)
    model.eval()
    metrics: dict[str, float] = {}
    if world.main:
        with torch.no_grad():
            metrics = evaluate(model)
        if not isinstance(metrics, dict):
            raise TypeError(
                f"evaluate(model) returned a {type(metrics).__name__}; fit() takes "
                "a dict of dev metrics, e.g. {'accuracy': 0.91}"
            )
        metrics = {k: _number(k, v) for k, v in metrics.items()}
    for cb in callbacks:
        cb.on_eval_end(state, model)
    if world.size > 1:
        metrics = distributed.from_main(metrics, world)
    return metrics


def flush_denormals(device: torch.device | None = None) -> bool:
    """On the CPU (``device`` None or a CPU), subnormal floats read and written as zero from now
    on, by this thread and the threads it starts later (torch's CPU threads take the flag as it
    is when they start: the ``treeqa`` command sets it before any); returns whether they were
    before, for ``torch.set_flush_denormal`` to put back. Weights that get no gradient (a
    Child-Sum cell's forget-gate input weights on constituency trees, whose inner nodes have no
    word) shrink under weight decay into subnormals, which the CPU computes many times slower:
    an SST epoch of ``childsum_fine`` ran 1.74x faster flushed, ``tree_gru_fine`` 1.80x
    (``benchmarks/results/denormals.md``). A GPU flushes in its own kernels; nothing changes
    there."""
    before = bool((torch.tensor(1e-39) * 1.0).item() == 0.0)  # float32's smallest normal: 1.2e-38
    if device is None or device.type == "cpu":
        torch.set_flush_denormal(True)
    return before


def fit(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_batches: Callable[[int], Iterable[Any]],
    config: TrainConfig,
    *,
    evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
    callbacks: Sequence[Callback] = (),
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    state: TrainState | None = None,
) -> TrainState:
    """Train ``model`` until ``config.epochs`` or a callback sets ``state.stop``.

    ``train_batches(epoch)`` yields the batches of one epoch (its order must depend only on
    the epoch, so a resumed run sees the same data; a sequence, such as ``Collated``, is read
    only at the positions this process trains on); a batch has ``.to(device)`` (a tensor, or
    a dataclass such as ``TreeBatch``) and, to count examples rather than batches in the logged
    rates, ``num_examples``. ``evaluate(model)`` returns dev metrics.
    Pass the ``state`` of a resumed run to continue it. Started by torchrun, the processes
    train one model data-parallel (``distributed.py``). A callback that sets
    ``state.interrupted`` (``StopOnSignal``) with ``state.stop`` stops the run after the step:
    nothing is scored, ``on_interrupt`` saves it, and ``Interrupted`` is raised at the end.
    """
    if not callable(train_batches):  # a DataLoader, say
        raise TypeError(
            f"train_batches is a {type(train_batches).__name__}; fit() takes a function of the "
            "epoch that returns its batches, e.g. lambda epoch: loader"
        )
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config is a {type(config).__name__}; fit() takes a TrainConfig")
    state = state or TrainState()
    device = resolve_device(config.device)
    world = distributed.World.from_env()
    if world.size > 1:
        device = distributed.join(world, device)
        callbacks = [cb for cb in callbacks if world.main or not cb.main_only]
    model.to(device)
    net = distributed.wrap(model, device) if world.size > 1 else model  # forward through net
    if config.compile != "off":  # in place: the state dict keeps its names
        net.compile(mode=config.compile, backend=COMPILE_BACKEND)
    seed = torch.initial_seed()  # the run's seed (restoring an RNG state leaves it as it was)
    state.scaler = scaler = loss_scaler(device, config.amp, state)
    for cb in callbacks:
        cb.on_fit_start(state, model, optimizer)
    flushing = flush_denormals(device)
    try:
        while state.epoch < config.epochs and not state.stop:
            model.train()
            if state.epoch_step == 0:  # not an epoch resumed part-way
                state.loss_sum, state.loss_steps = torch.zeros((), device=device), 0
            state.loss_sum = state.loss_sum.to(device)
            for cb in callbacks:
                cb.on_epoch_start(state)
            tick = time.perf_counter()
            # From the first batch not done before the run was interrupted: a sequence's
            # batches before it are not read, so not collated.
            epoch_batches = distributed.shard(train_batches(state.epoch), world, state.epoch_step)
            for batch in epoch_batches:
                if world.rank > 0:
                    # Other dropout masks than process 0's (whose RNG state the checkpoint keeps),
                    # drawn from the step number, so a resumed run draws the ones it drew before.
                    torch.manual_seed(
                        ((seed * 1_000_003 + world.rank) * 1_000_003 + state.step) % 2**63
                    )
                if not hasattr(batch, "to"):
                    raise TypeError(
                        f"a training batch is a {type(batch).__name__}; fit() needs batches with "
                        ".to(device): a tensor, or a dataclass of tensors with its own .to"
                    )
                batch = batch.to(device)
                started = time.perf_counter()
                state.data_time = started - tick
                for cb in callbacks:
                    cb.on_batch_start(state, batch)
                with autocast(device, config.amp):
                    output: Output = net(batch)
                if not isinstance(output, Output):
                    raise TypeError(
                        f"the model's forward returned a {type(output).__name__}; fit() takes "
                        "an Output(logits, loss) (treeqa.models.common)"
                    )
                loss = check_loss(output.loss)
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)  # callbacks and clipping see the true gradients
                for cb in callbacks:
                    cb.on_after_backward(state, model)
                if config.clip > 0:
                    clip_gradients(model.parameters(), config.clip)
                scaler.step(optimizer)  # skipped when a gradient overflowed float16
                scaler.update()
                if scheduler is not None:
                    with warnings.catch_warnings():
                        # A first step skipped for overflow is not the misordering torch warns of.
                        warnings.filterwarnings(
                            "ignore", "Detected call of `lr_scheduler.step", UserWarning
                        )
                        scheduler.step()
                state.loss_sum += loss.detach().float()
                state.loss_steps += 1
                state.step += 1
                state.epoch_step += 1
                state.step_time = time.perf_counter() - started
                for cb in callbacks:
                    cb.on_step_end(state, output, batch)
                if world.size > 1:
                    state.stop = distributed.any_stop(state.stop)
                # The wait for the next batch starts here: the callbacks' own work (the health
                # monitor's, a checkpoint) is neither the step's compute nor waiting for data.
                tick = time.perf_counter()
                if state.stop:
                    break
            else:
                state.epoch, state.epoch_step = state.epoch + 1, 0
            # A stop part-way (a time budget) leaves the epoch's position as it is: the run is
            # scored and saved there, and a resumed run goes on from the next batch.
            if state.stop and world.size > 1:  # every process stops here; all leave, or none
                state.abort = distributed.any_stop(state.abort)
                state.interrupted = distributed.largest(state.interrupted)
            if state.abort:
                break
            if state.interrupted:  # a signal: saved where it is, scored when the run goes on
                for cb in callbacks:
                    cb.on_interrupt(state)
                break
            if state.loss_steps == 0 and not state.stop:
                raise ValueError(
                    f"epoch {state.epoch} gave this process no batch to train on"
                    + (
                        f": under torchrun each of the {world.size} processes takes one batch "
                        f"in {world.size}; use smaller batches or fewer processes"
                        if world.size > 1
                        else ""
                    )
                )
            metrics: dict[str, float] = {}
            if evaluate is not None:
                metrics = _dev_metrics(evaluate, model, state, callbacks, world)
            if metrics:
                check_metric(config.metric, metrics)
            score = metrics.get(config.metric)
            state.improved = score is not None and score > state.best
            if score is not None and state.improved:
                state.best, state.best_epoch = score, state.scored_epoch
                state.best_step, state.best_partial = state.step, state.epoch_step > 0
            state.history.append({"epoch": state.scored_epoch, **metrics})
            for cb in callbacks:
                cb.on_epoch_end(state, metrics)
            if world.size > 1:
                state.stop = distributed.any_stop(state.stop)
                state.interrupted = distributed.largest(state.interrupted)
        for cb in callbacks:
            cb.on_fit_end(state)
        if state.interrupted:
            raise Interrupted(state.interrupted, state)
        return state
    except RuntimeError as err:
        lost = distributed.peer_lost(err, world)
        if lost is None:
            raise
        raise lost from err
    finally:
        torch.set_flush_denormal(flushing)
        for cb in callbacks:
            cb.on_teardown(state)
