"""``metric-not-reset``: a torchmetrics metric read once a pass, never reset between passes.

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
(looked for when a DataLoader iterator is made and at the clock's first step). At each compute it keeps the metric's update
count and the pass of the DataLoader the latest batch came from (with no DataLoader, batches
sliced by hand, the clock's step at the latest evaluation of a trained model stands for it). A compute whose state still
holds the updates counted at the metric's compute before (no reset between: its count grew
past that one), while the latest batch came from another pass (another epoch, or another
loader) than then, carried a pass over; ``COMPUTES`` such computes of one metric make the
finding, at the script's line that computed it.
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


@dataclass
class Computed:
    """A metric's last compute: its update count then, the pass its latest batch came from,
    and how many computes in a row held the updates of the one before."""

    metric: weakref.ref[Any]
    count: int
    drawn: Any
    carried: int = 0


class MetricResets:
    """``add``: where the finding goes; ``drawn_from()``: the pass of the DataLoader the
    latest batch came from (``Loaders.drawn_pass``) or, with no DataLoader, ("evaluated at",
    the clock's step at the latest evaluation)."""

    def __init__(self, add: Callable[[Finding], None], drawn_from: Callable[[], Any]):
        self.add, self.drawn_from = add, drawn_from
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
        if not should_unsync or self.said:  # (a batch's value, inside forward)
            return
        count = int(getattr(metric, "_update_count", 0))
        drawn = self.drawn_from()
        last = self.computed.get(id(metric))
        if last is not None and last.metric() is not metric:  # (another's, gone)
            last = None
        carried, before = 0, 0
        if last is not None and count > last.count:  # no reset since the compute before
            over = _other(drawn, last.drawn)
            carried = last.carried + 1 if over else last.carried
            before = last.count
        self.computed[id(metric)] = Computed(weakref.ref(metric), count, drawn, carried)
        if carried >= COMPUTES:
            self.said = True
            found = metric_not_reset(type(metric).__name__, carried + 1, count, before)
            found.where = sites.user_site()
            self.add(found)


def _other(drawn: Any, before: Any) -> bool:
    """Whether a batch drawn from ``drawn`` came from another pass than ``before``: another
    DataLoader pass (compared by identity), or where batches are made by hand, a later
    evaluation (("evaluated at", step) compared by value; no evaluation yet tells nothing)."""
    if isinstance(drawn, tuple) and isinstance(before, tuple):
        return drawn != before and None not in (drawn[1], before[1])
    return drawn is not before


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
