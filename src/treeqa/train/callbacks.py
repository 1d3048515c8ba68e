"""The standard callbacks: progress bar, JSONL metrics log, checkpoints, early stopping, a
clean stop on SIGTERM; ``standard_callbacks`` puts a recipe's together."""

from __future__ import annotations

import json
import signal
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from treeqa import config as cfg
from treeqa.models.common import Output
from treeqa.train import checkpoint as ckpt
from treeqa.train.distributed import World
from treeqa.train.ema import EMA
from treeqa.train.loop import Callback, TrainConfig, TrainState


def standard_callbacks(
    run_dir: Path,
    train: TrainConfig,
    meta: dict[str, Any],
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    ema: EMA | None,
    batches_per_epoch: int,
) -> list[Callback]:
    """What every recipe's run has, in order: the progress bar, the metrics log, the EMA
    (before the Checkpointer: it swaps its shadows in and out around evaluation), the
    checkpoints and early stopping. ``batches_per_epoch``: this process's."""
    return [
        ProgressBar(total=batches_per_epoch),
        MetricsLog(run_dir, train.log_every),
        *([ema] if ema is not None else []),
        Checkpointer(
            run_dir,
            meta,
            scheduler,
            ema.checkpoint_tensors if ema is not None else None,
            every=train.checkpoint_every,
        ),
        EarlyStopping(train.patience),
    ]


def say(text: str) -> None:
    """``text`` on process 0's output only: a message about the run, from code every process
    runs (under torchrun the others would say it again)."""
    if World.from_env().main:
        tqdm.write(text)


def batch_size_of(batch: Any) -> int:
    return int(getattr(batch, "num_examples", 1))


class ProgressBar(Callback):
    """One bar per epoch showing the running loss and examples per second (of every process,
    as ``MetricsLog`` counts them)."""

    main_only = True

    def __init__(self, total: int | None = None, every: int = 10):
        self.total, self.every = total, every
        self.bar: tqdm | None = None
        self.processes = World.from_env().size

    def on_epoch_start(self, state: TrainState) -> None:
        self.bar = tqdm(
            total=self.total,
            desc=f"epoch {state.epoch + 1}",
            unit="batch",
            leave=False,
            disable=None,
        )
        self.seen, self.steps, self.started = 0, 0, time.perf_counter()

    def on_step_end(self, state: TrainState, output: Output, batch: Any) -> None:
        assert self.bar is not None
        self.seen += batch_size_of(batch) * self.processes
        self.steps += 1
        self.bar.update(1)
        if self.steps % self.every == 0:
            rate = self.seen / max(time.perf_counter() - self.started, 1e-9)
            self.bar.set_postfix(loss=f"{state.epoch_loss:.4f}", ex_s=f"{rate:.0f}")

    def on_interrupt(self, state: TrainState) -> None:
        if self.bar is not None:
            self.bar.close()

    def on_epoch_end(self, state: TrainState, metrics: dict[str, float]) -> None:
        if self.bar is not None:
            self.bar.close()
        shown = " ".join(f"{k}={v:.4f}" for k, v in metrics.items())
        tqdm.write(f"epoch {state.scored_epoch}: train_loss={state.epoch_loss:.4f} {shown}")


def read_log(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The lines of a ``metrics.jsonl``, each with its record; a last line cut short by a kill
    is left out, and a line that is not a JSON object is a ValueError naming its file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    out = []
    for number, line in enumerate(lines, 1):
        if not line.endswith("\n"):
            break
        try:
            record = json.loads(line)
        except ValueError as err:
            raise ValueError(f"{path}:{number}: not a JSON line ({err})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, got {line.strip()[:40]}")
        out.append((line, record))
    return out


class MetricsLog(Callback):
    """``metrics.jsonl`` in the run directory: a line every ``every`` steps and one per epoch.
    Losses are process 0's; examples per second count every process (under torchrun they
    take the same number of batches, so process 0's count times the processes)."""

    main_only = True

    def __init__(self, run_dir: Path, every: int = 50):
        self.path, self.every = Path(run_dir) / "metrics.jsonl", every
        self.processes = World.from_env().size

    def _write(self, record: dict[str, Any]) -> None:
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as err:  # the system's error names no file
            raise OSError(f"{self.path}: could not add a line ({err.strerror or err})") from err

    def on_fit_start(
        self, state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        self.optimizer = optimizer
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and state.step == 0:
            # A new run's folder held a log (a user's, or a try killed before its first
            # checkpoint): kept aside as metrics.1.jsonl, as an earlier config.toml is.
            if self.path.stat().st_size:
                print(f"{self.path} held another log: kept as {ckpt.keep_aside(self.path)}")
            self.path.unlink(missing_ok=True)
        elif self.path.exists():
            # A resumed run repeats the steps after its last checkpoint: drop their old lines,
            # and the epoch lines its checkpoint has not scored (one per history entry): a run
            # killed after an epoch's line but before that epoch's last checkpoint, whose last
            # one is the step checkpoint at the epoch's final batch, scores that epoch again.
            kept, epochs = [], 0
            for text, record in read_log(self.path):
                if record.get("step", 1) > state.step:
                    continue
                if "train_loss" in record:
                    epochs += 1
                    if epochs > len(state.history):
                        continue
                kept.append(text)
            ckpt.write_text_atomic(self.path, "".join(kept))

    def on_epoch_start(self, state: TrainState) -> None:
        if state.epoch_step == 0:  # not an epoch resumed part-way, whose window goes on
            state.log_sum, state.log_steps = torch.zeros(()), 0
        self.window_examples = self.epoch_examples = 0
        self.window_start = self.epoch_start = time.perf_counter()

    def on_step_end(self, state: TrainState, output: Output, batch: Any) -> None:
        assert output.loss is not None
        loss = output.loss.detach().float()  # stays on its device: no sync until a log line
        state.log_sum = state.log_sum.to(loss.device) + loss
        state.log_steps += 1
        n = batch_size_of(batch) * self.processes
        self.window_examples, self.epoch_examples = (
            self.window_examples + n,
            self.epoch_examples + n,
        )
        if state.step % self.every == 0:
            now = time.perf_counter()
            self._write(
                {
                    "step": state.step,
                    "epoch": state.epoch + 1,
                    "loss": state.log_sum.item() / state.log_steps,
                    "lr": self.optimizer.param_groups[0]["lr"],
                    "examples_per_s": self.window_examples / max(now - self.window_start, 1e-9),
                }
            )
            state.log_sum, state.log_steps = torch.zeros(()), 0
            self.window_examples, self.window_start = 0, now

    def on_epoch_end(self, state: TrainState, metrics: dict[str, float]) -> None:
        elapsed = time.perf_counter() - self.epoch_start
        self._write(
            {
                "epoch": state.scored_epoch,
                "step": state.step,
                **({"partial": True} if state.epoch_step else {}),  # scored again at its end
                "train_loss": state.epoch_loss,
                "epoch_time_s": elapsed,
                "examples_per_s": self.epoch_examples / max(elapsed, 1e-9),
                **{f"dev_{k}": v for k, v in metrics.items()},
            }
        )


class Checkpointer(Callback):
    """``best.safetensors`` when the dev metric improves, ``last.safetensors`` every epoch.

    ``meta`` describes the model (name, config, vocab, task, training config); the last
    checkpoint adds what a resumed run needs: loop state, optimiser, scheduler and RNG state.
    ``extra_tensors(kind)`` ("best" or "last") returns tensors merged over the saved ones; a
    ``model.*`` key replaces that weight (the EMA callback stores its shadows this way).
    With ``every`` > 0 the last checkpoint is also written every ``every`` steps.
    """

    main_only = True

    def __init__(
        self,
        run_dir: Path,
        meta: dict[str, Any],
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        extra_tensors: Callable[[str], dict[str, torch.Tensor]] | None = None,
        every: int = 0,
    ):
        for key, value in meta.items():  # now, not when the first epoch's end saves it
            try:
                json.dumps(value)
            except (TypeError, ValueError) as err:
                raise TypeError(
                    f"Checkpointer meta[{key!r}] is a {type(value).__name__}, which a checkpoint's "
                    f"JSON header cannot hold ({err}): give plain values (a config dataclass "
                    "as treeqa.config.to_dict(config), a path as str(path))"
                ) from None
        self.run_dir, self.meta, self.scheduler = Path(run_dir), meta, scheduler
        self.every = every
        self.extra_tensors = extra_tensors or (lambda kind: {})

    def on_fit_start(
        self, state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        self.model, self.optimizer = model, optimizer

    def weights(self) -> dict[str, torch.Tensor]:
        return {f"model.{k}": v for k, v in self.model.state_dict().items()}

    def finite(self, state: TrainState) -> bool:
        """Whether the weights are finite; non-finite ones are never saved over good ones."""
        if all(bool(p.isfinite().all()) for p in self.model.parameters()):
            return True
        tqdm.write(
            f"step {state.step}: the weights hold NaN or infinity; {self.run_dir}'s checkpoints "
            "stay as they were"
        )
        return False

    def on_step_end(self, state: TrainState, output: Output, batch: Any) -> None:
        if self.every > 0 and state.step % self.every == 0 and self.finite(state):
            self.save_last(state, {**self.meta, "epoch": state.epoch, "step": state.step})

    def on_epoch_end(self, state: TrainState, metrics: dict[str, float]) -> None:
        if not self.finite(state):
            return
        meta = {**self.meta, "metrics": metrics, "epoch": state.epoch, "step": state.step}
        if state.improved or not metrics:
            best = {**self.weights(), **self.extra_tensors("best")}
            self.save(best, {**meta, "kind": "best"}, ckpt.BEST)
        self.save_last(state, meta)

    def on_interrupt(self, state: TrainState) -> None:
        if self.finite(state):
            self.save_last(state, {**self.meta, "epoch": state.epoch, "step": state.step})
            tqdm.write(f"step {state.step}: saved {self.run_dir / ckpt.LAST}")

    def save_last(self, state: TrainState, meta: dict[str, Any]) -> None:
        optim_tensors, optim_meta = ckpt.optimizer_tensors(self.optimizer)
        rng, rng_meta = ckpt.rng_tensors()
        sched = self.scheduler.state_dict() if self.scheduler is not None else None
        if sched is not None:
            sched.pop("lr_lambdas", None)
        extra = {
            "kind": "last",
            "processes": World.from_env().size,
            "state": state.to_json(),
            "optimizer": optim_meta,
            "scheduler": sched,
            "rng": rng_meta,
        }
        tensors = {**self.weights(), **optim_tensors, **rng, **self.extra_tensors("last")}
        self.save(tensors, {**meta, **extra}, ckpt.LAST)

    def save(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any], name: str) -> None:
        try:
            ckpt.atomic_save(tensors, meta, self.run_dir / name)
        except OSError as err:  # a full disk, a file size limit: the run can go on later
            failed = OSError(
                f"{err}. Make room for it, then --resume {self.run_dir} goes on from the run's "
                "last checkpoint"
            )
            failed.errno = err.errno
            raise failed from err


class StopOnSignal(Callback):
    """Ctrl-C (SIGINT) or SIGTERM (a scheduler preempting the job) stops the run after the step
    in progress, or after the evaluation in progress: ``fit()`` has the last checkpoint written
    there and raises ``Interrupted``, and ``--resume`` goes on from it. A second signal stops
    at once, as without this callback (the run then resumes from its previous checkpoint).

    The handlers are the run's only: installed when it starts, the previous ones put back when
    it ends, however it ends. Python runs handlers in the main thread only, so a run in another thread keeps
    the default behaviour. Under torchrun a signal to any process stops them all at one step.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.caught = 0
        self.previous: dict[int, Any] = {}
        self.evaluating = False

    def on_fit_start(
        self, state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        self.caught = 0
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self.handle) for s in self.SIGNALS}

    def handle(self, signum: int, frame: Any) -> None:
        if self.caught:  # the second: act as if this callback were not there
            self.restore()
            signal.raise_signal(signum)
            return
        self.caught = signum
        now = "evaluation" if self.evaluating else "step"
        tqdm.write(
            f"{signal.Signals(signum).name}: stopping after this {now} and saving the run "
            "(again to stop at once)"
        )

    def on_eval_start(self, state: TrainState, model: nn.Module) -> None:
        self.evaluating = True

    def on_eval_end(self, state: TrainState, model: nn.Module) -> None:
        self.evaluating = False

    def restore(self) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}

    def stop(self, state: TrainState) -> None:
        if self.caught:
            state.stop, state.interrupted = True, self.caught

    def on_step_end(self, state: TrainState, output: Output, batch: Any) -> None:
        self.stop(state)

    def on_epoch_end(self, state: TrainState, metrics: dict[str, float]) -> None:
        self.stop(state)

    def on_teardown(self, state: TrainState) -> None:
        self.restore()


class EarlyStopping(Callback):
    """Stop when the dev metric has not improved for ``patience`` epochs."""

    def __init__(self, patience: int):
        self.patience = patience

    def due(self, state: TrainState) -> bool:
        return (
            self.patience > 0
            and state.best_epoch >= 0
            and state.epoch - state.best_epoch >= self.patience
        )

    def on_fit_start(
        self, state: TrainState, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        # A resumed run that had stopped early stays stopped (a larger patience continues it).
        if not state.stop and self.due(state):
            state.stop = True
            say(
                f"stopped early before: no better dev score for {state.epoch - state.best_epoch} "
                f"epochs since the best (epoch {state.best_epoch}), and train.patience is "
                f"{self.patience}; raise --train.patience to train on"
            )

    def on_epoch_end(self, state: TrainState, metrics: dict[str, float]) -> None:
        if self.due(state):
            say(
                f"early stop: no better dev score for {self.patience} epochs (best epoch {state.best_epoch})"
            )
            state.stop = True


RESUMABLE = frozenset(
    {"name", "train.epochs", "train.patience", "train.log_every", "train.checkpoint_every"}
    | {"train.health", "train.device", "train.amp", "train.compile", "schedule.budget_minutes"}
    | {"data.eval_batch_size", "data.path", "data.vectors", "data.prepared", "data.pad_multiple"}
)
"""The settings a resumed run may change: how long it goes on, how it is run and watched, and
where its data now lies (``resume`` checks that the vocabulary is the run's), not what it
learns (an optimiser's restored state would keep its old learning rate, say)."""


def _settings_of(config: Any, keys: Iterable[str]) -> list[str]:
    """The ``section.key`` names among ``keys`` that ``config`` has, sorted."""

    def has(key: str) -> bool:
        obj = config
        for part in key.split("."):
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True

    return sorted(k for k in keys if has(k))


def check_resumable(run_dir: Path, config: Any) -> None:
    """A ConfigError when ``config`` changes a setting, outside ``RESUMABLE``, of the run
    ``run_dir`` is to continue; a run with no last checkpoint yet starts afresh with any.
    The settings compared with are those the last checkpoint records (config.toml's, for a
    checkpoint that does not): a learning rate edited into config.toml would otherwise pass,
    and the optimiser's restored state would train on with the old one."""
    stored = run_dir / "config.toml"
    if not (run_dir / ckpt.LAST).is_file() or not stored.is_file():
        return
    text = stored.read_text(encoding="utf-8")
    meta = ckpt.read_meta(run_dir, prefer=ckpt.LAST)
    recorded: Any = meta.get("config")
    if not text.strip():  # emptied by hand: the comparison below would list every setting
        how = (
            f"remove it and --resume writes it again from {ckpt.LAST}, which records them"
            if isinstance(recorded, str) and recorded.strip()
            else "restore it"
        )
        raise cfg.ConfigError(
            f"{stored} is empty, so the settings {run_dir} was trained with are not known: "
            f"{how}, or give the new run another --out"
        )
    if recorded is None:  # a checkpoint of an earlier treeqa: the sections it does record
        sections = {"model": "model_config", "train": "train_config", "data": "data"}
        sections |= {"schedule": "schedule"}
        recorded = tomllib.loads(text) | {
            section: meta[key]
            for section, key in sections.items()
            if isinstance(meta.get(key), dict)
        }
    changed = cfg.changed_settings(recorded, config, RESUMABLE)
    if changed:
        raise cfg.ConfigError(
            f"{run_dir} was trained with other settings, and a resumed run keeps its own: "
            f"{'; '.join(changed)}. Only {', '.join(_settings_of(config, RESUMABLE))} may "
            "change when it goes on; give another --out to train with these"
        )


def say_if_done(run_dir: Path, state: TrainState | None, epochs: int) -> None:
    """Say so when a resumed run has already trained ``epochs`` epochs: it trains nothing, and
    the scores printed are those it had."""
    if state is None or state.epoch < epochs:
        return
    trained = f"{state.epoch} epoch(s)"
    if state.epoch_step:  # stopped part-way through the next one, which fewer epochs leave out
        trained += f" and {state.epoch_step} batch(es) of epoch {state.epoch + 1}"
    say(
        f"{run_dir}: already trained {trained}, train.epochs is {epochs}: "
        "nothing more to train; the scores are those it has"
    )


def resume(
    run_dir: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    same: Mapping[str, Any] | None = None,
) -> TrainState | None:
    """Load the last checkpoint of ``run_dir`` into model, optimiser, scheduler and RNG.
    ``same``: metadata (the vocabularies built from the data) that must equal the run's.

    None when the run stopped before writing its first last checkpoint (a kill during the
    first epoch, or between its best and last writes): it starts again from step 0, which
    the seeded run replays exactly; a best checkpoint it left is kept aside, should the
    last one have been removed from a trained run.
    """
    if World.from_env().main:
        ckpt.remove_partial_writes(run_dir)
    if not (run_dir / ckpt.LAST).is_file():
        said = f"{run_dir}: no {ckpt.LAST} yet; the run starts again from its first step"
        if (run_dir / ckpt.BEST).is_file() and World.from_env().main:  # (last one removed?)
            kept = ckpt.keep_aside(run_dir / ckpt.BEST)
            said += f" (its {ckpt.BEST} is kept as {kept.name})"
        say(said)
        return None
    last = ckpt.load(run_dir, prefer=ckpt.LAST)
    if last.meta.get("kind") != "last":
        raise ckpt.CheckpointError(f"{run_dir}: no {ckpt.LAST} to resume from")
    processes, now = int(last.meta.get("processes", 1)), World.from_env().size
    if processes != now:  # its epoch position counts batches per process, its batch is P x B
        raise cfg.ConfigError(
            f"{run_dir} was trained by {processes} process(es) and is resumed by {now}: "
            f"resume it with as many (torchrun --nproc-per-node {processes})"
        )
    for key, value in (same or {}).items():
        if last.meta.get(key) != value:
            raise cfg.ConfigError(
                f"{run_dir} was trained on data with another {key.replace('_', ' ')} than the "
                "data given now: resume it on the data it began with"
            )
    last.load_weights(model)
    ckpt.restore_optimizer(optimizer, last)
    if scheduler is not None and last.meta.get("scheduler"):
        # lr_lambdas (functions) were left out when saving; LambdaLR's loader still expects
        # the key, and None entries keep the lambdas the scheduler was built with.
        sched = {"lr_lambdas": [None] * len(optimizer.param_groups), **last.meta["scheduler"]}
        scheduler.load_state_dict(sched)
    ckpt.restore_rng(last)
    state = TrainState.from_json(last.meta["state"])
    if World.from_env().main:
        say(f"{run_dir}: resuming after step {state.step} ({state.position()})")
    return state
