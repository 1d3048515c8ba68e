"""PyTorch Lightning adapter: ``Trainer(callbacks=[HealthCallback()])``.

Lightning is an optional extra (``pip install 'treeqa[lightning]'``) and is imported only when
the adapter is built.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

from treeqa.health.monitor import HealthMonitor


def _lightning() -> Any:
    """``lightning.pytorch``, or ``pytorch_lightning`` (the older package name)."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("the Lightning adapter needs lightning: pip install 'treeqa[lightning]'")


def HealthCallback(
    mode: str = "on",
    every: int = 50,
    json_path: str | Path | None = None,
    plot_path: str | Path | None = None,
) -> Any:
    """A Lightning ``Callback`` driving a ``HealthMonitor`` (report at the end of ``fit``)."""
    pl = _lightning()

    class _HealthCallback(pl.Callback):  # type: ignore[name-defined]
        def __init__(self) -> None:
            self.monitor = HealthMonitor(mode, every, json_path, plot_path)
            self.batch_end = time.perf_counter()
            self.started = self.batch_end
            self.loss: Any = None
            self.every = 1  # batches per optimiser step (accumulate_grad_batches)

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self.every = max(int(trainer.accumulate_grad_batches), 1)
            self.monitor.expect_epochs()
            self.monitor.watch(pl_module)
            self.monitor.install_loss_checks()

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self.monitor.epoch_ended()

        def on_train_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
        ) -> None:
            # A step is one optimiser step: with accumulate_grad_batches=k, k micro-batches.
            if batch_idx % self.every == 0:
                self.started = time.perf_counter()
                self.monitor.begin_step()

        def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
            # The loss Lightning hands to on_train_batch_end is detached: the graph checks
            # (retained graphs, a running total of losses) need the one backward runs on.
            self.loss = loss

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            if (batch_idx + 1) % self.every and not trainer.is_last_batch:
                return  # a micro-batch of an accumulation: the step goes on
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if self.loss is not None:
                loss, self.loss = self.loss, None
            now = time.perf_counter()
            self.monitor.end_step(loss, now - self.started, self.started - self.batch_end)
            self.batch_end = time.perf_counter()
            if self.monitor.stop_requested:
                trainer.should_stop = True

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            self.monitor.paused = True

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            self.monitor.paused = False
            self.batch_end = time.perf_counter()  # validation is not data wait

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            self.monitor.finish()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self.monitor.uninstall()  # a failed fit leaves no hook or wrapper behind

    return _HealthCallback()
