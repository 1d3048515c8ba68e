"""``metric-not-reset``: a torchmetrics metric read once an epoch, never reset between epochs.

A torchmetrics ``Metric`` (``Accuracy``, ``F1Score``, ``MeanSquaredError``, a
``MetricCollection`` of them) adds each ``update`` (or call) to its state until ``reset()``;
``compute()`` reads the state. A loop that updates it over each epoch's validation and computes
it at the epoch's end without ``reset()`` reports, at epoch k, the metric over all k epochs: it
lags the model (a model that got better reads worse than it is), and the best epoch, an early
stop or a ``ReduceLROnPlateau`` picked from it are picked from the wrong numbers. Lightning resets
the metric objects given to ``self.log``, not one whose ``compute()`` a hook logs as a value.

The doctor wraps ``Metric.sync_context`` (each ``compute`` with new updates runs it; not one
inside ``forward``, whose value is the batch's: it passes ``should_unsync=False``) and
``Metric.reset`` (not the resets ``forward`` makes inside itself) once torchmetrics is imported
(looked for when a DataLoader iterator is made and at the clock's first step). At each compute
it keeps the metric's update count, the training pass then (the DataLoader pass the latest
training batch came from; with training batches sliced by hand, the clock's step at the latest
evaluation of a trained model) and the dataset the latest batch came from. A compute whose
state still holds the updates counted at the metric's compute before (no reset between: its
count grew past that one), in another training pass than then and over the same dataset (or
one unknown), carried an epoch over; ``COMPUTES`` such computes of one metric make the finding,
at the script's line that computed it. A running value read within an epoch (reset at its end),
a pooled score over other data each time (out-of-fold predictions, a stream's new days), and
the metrics that keep a value across epochs by design (``MaxMetric``, ``MinMetric``,
``Running``) are not named; nor is a metric of the script's own class whose ``reset`` does not
call ``Metric.reset`` (its resets are not seen).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_calls

COMPUTES = 2
"""Computes of one metric, each over a state that held the pass before's updates too."""
FORWARDS = ("_forward_reduce_state_update", "_forward_full_state_update")
"""``Metric.forward``'s helpers, which reset the state for the batch's value and put it back."""
ACROSS_EPOCHS = ("MaxMetric", "MinMetric", "Running")
"""torchmetrics classes that keep a value across epochs by design (a best score so far, a
window over the latest updates)."""


@dataclass
class Computed:
    """A metric's last compute: its update count then, the training pass and the dataset
    then (``Epoch``), and how many computes in a row held the updates of an epoch before."""

    metric: weakref.ref[Any]
    count: int
    epoch: tuple[Any, Any]
    carried: int = 0


class MetricResets:
    """``add``: where the finding goes; ``epoch()``: (the training pass: the DataLoader pass
    the latest training batch came from or, with training batches sliced by hand, ("evaluated
    at", the clock's step at the latest evaluation); the dataset the latest batch came from,
    None where unknown)."""

    def __init__(self, add: Callable[[Finding], None], epoch: Callable[[], tuple[Any, Any]]):
        self.add, self.epoch = add, epoch
        self.wrappers = Wrappers()
        self.installed = False
        # by the metric's id: a Metric's hash is its state's, which each update changes
        self.computed: dict[int, Computed] = {}
        self.said = False

    def look(self) -> None:
        """Wrap torchmetrics, once the script imported it (the doctor looks when a DataLoader
        iterator is made and when the clock's models are found)."""
        if self.installed or "torchmetrics.metric" not in sys.modules:
            return
        self.installed = True
        metric = sys.modules["torchmetrics.metric"].Metric
        self.wrappers.add(note_calls(metric, "sync_context", self._computing))
        self.wrappers.add(note_calls(metric, "reset", self._reset))

    def uninstall(self) -> None:
        self.wrappers.undo()

    def _reset(self, metric: Any) -> None:
        frame = sys._getframe(1)
        for _ in range(4):  # (the wrappers' frames, then the caller's)
            frame = frame.f_back  # type: ignore[assignment]
            if frame is None or frame.f_code.co_name in FORWARDS:
                return
        self.computed.pop(id(metric), None)

    def _computing(self, metric: Any, *args: Any, should_unsync: bool = True, **kwargs: Any):
        if not should_unsync or self.said or not _judged(metric):  # (forward: a batch's value)
            return
        count = int(getattr(metric, "_update_count", 0))
        epoch = self.epoch()
        last = self.computed.get(id(metric))
        if last is not None and last.metric() is not metric:  # (another's, gone)
            last = None
        carried, before = 0, 0
        if last is not None and count > last.count:  # no reset since the compute before
            carried = last.carried + _another_epoch(epoch, last.epoch)
            before = last.count
        self.computed[id(metric)] = Computed(weakref.ref(metric), count, epoch, carried)
        if carried >= COMPUTES:
            self.said = True
            found = metric_not_reset(type(metric).__name__, carried + 1, count, before)
            found.where = sites.user_site()
            self.add(found)


def _judged(metric: Any) -> bool:
    """Not a metric kept across epochs by design, nor one whose resets are not seen: a class of
    the script's own whose ``reset`` does not call ``super()``'s."""
    kinds = type(metric).__mro__
    if any(k.__name__ in ACROSS_EPOCHS and k.__module__.startswith("torchmetrics") for k in kinds):
        return False
    owner = next((k for k in kinds if "reset" in vars(k)), None)
    if owner is None or owner.__module__.startswith("torchmetrics"):
        return True
    code = getattr(vars(owner)["reset"], "__code__", None)
    return code is not None and "super" in code.co_names


def _another_epoch(epoch: tuple[Any, Any], before: tuple[Any, Any]) -> bool:
    """Whether ``epoch`` is a later training pass than ``before`` over the same data: another
    DataLoader pass (compared by identity), or a later evaluation (("evaluated at", step), by
    value; none yet tells nothing), with the dataset the same or unknown."""
    (trained, data), (trained_before, data_before) = epoch, before
    if isinstance(trained, tuple) and isinstance(trained_before, tuple):
        later = trained != trained_before and None not in (trained[1], trained_before[1])
    else:
        later = trained is not trained_before
    return later and (data is None or data_before is None or data == data_before)


def metric_not_reset(metric: str, computes: int, count: int, before: int) -> Finding:
    """``metric`` was computed ``computes`` times over more passes each, without a reset: at
    the last, its state held ``count`` updates, ``before`` of them from the passes before."""
    return Finding(
        "metric-not-reset",
        "warning",
        f"{metric} was computed after {computes} passes over the data without reset() between "
        f"them: its last value is over {count} updates, {before} of them from the passes "
        "before, so each value reported is the metric over every pass so far. It lags the "
        "model, and a best epoch, an early stop or a learning-rate plateau read from it is "
        "read from the wrong numbers",
        evidence={"metric": metric, "computes": computes, "updates": count, "carried": before},
    )
