"""The monitor's series kept to a bounded size however long the run.

Each step appends a row (one value to each series, ``step`` among them). When the rows reach
``ROWS``, the older ones are thinned: before the last ``RECENT`` steps, only the steps that are
multiples of a stride (a power of two, doubled until they fill at most half the room left to
them) keep their rows; the last ``RECENT`` steps keep every row. So the series hold every step
of a short run; a long one's hold its early steps evenly thinned, and its recent ones whole:
a loss read late from a GPU, the steps before a NaN and the latest steps' data wait are all
there. Steps are kept by their number, not their row, so a series read on every 4th step (the
reference workload) keeps its readings at strides of 4 and up, as do every ``every``-th
(sampled) steps at strides dividing ``every``.

The checks over quarters of the run read ``even``: every series at the stride all through (the
recent rows thinned like the rest), so that a quarter of its rows is a quarter of the steps.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import MutableMapping, MutableSequence, Sequence

ROWS = 2**16
"""Rows each series holds at most: 8 bytes each, ~6 MB for the monitor's 12 series."""
RECENT = 2**12
"""The latest steps, every one kept."""


class Thinning:
    """Which rows of a monitor's series are kept: before step ``whole_from``, the multiples of
    ``stride`` only (``stride`` 1: none thinned yet)."""

    def __init__(self, rows: int = ROWS, recent: int = RECENT):
        if not 0 < 2 * recent <= rows:
            raise ValueError(f"rows={rows}, recent={recent}: expected 0 < 2 x recent <= rows")
        self.rows, self.recent = rows, recent
        self.stride = 1
        self.first = 0  # the series' first step, before any thinning
        self.whole_from = 0  # the first step of the rows kept whole
        self.thinned = 0  # rows before it

    def thin(self, series: MutableMapping[str, MutableSequence[float]]) -> None:
        """Thin the rows before the last ``recent`` steps, every series alike."""
        steps = series["step"]
        cut = len(steps) - self.recent  # the first row kept whole from now on
        if self.stride == 1:
            self.first = int(steps[0])
        start, whole_from = int(steps[0]), int(steps[cut])
        stride = self.stride
        while multiples(start, whole_from, stride) > (self.rows - self.recent) // 2:
            stride *= 2
        # Rows [0, thinned) are the multiples of the old stride, rows [thinned, cut) every step.
        skip = stride // self.stride
        head = (-start) % stride // self.stride
        tail = self.thinned + (-int(steps[self.thinned])) % stride
        for name, values in list(series.items()):
            kept = values[head : self.thinned : skip]  # a new array: the old one is freed
            kept.extend(values[tail:cut:stride])
            kept.extend(values[cut:])
            series[name] = kept
        self.stride, self.whole_from = stride, whole_from
        self.thinned = len(series["step"]) - self.recent

    def keeps(self, step: int) -> bool:
        """Whether ``step``'s row is still kept (once it was: a step of the run so far)."""
        return step >= self.whole_from or step % self.stride == 0

    def even(self, values: Sequence[float]) -> Sequence[float]:
        """``values`` (a series) at the stride all through: its thinned rows, then the whole
        ones at the same stride. The series itself while none is thinned."""
        if self.stride == 1:
            return values
        at = self.thinned + (-self.whole_from) % self.stride
        return values[: self.thinned] + values[at :: self.stride]  # type: ignore[operator]

    def warm_rows(self, steps: Sequence[float], warm: int) -> int:
        """The rows of ``even`` ``steps`` among the series' first ``warm`` steps."""
        return warm if self.stride == 1 else bisect_left(steps, self.first + warm)


def multiples(start: int, end: int, stride: int) -> int:
    """How many multiples of ``stride`` lie in [start, end)."""
    return (end - 1) // stride - (start - 1) // stride


def row(steps: Sequence[float], step: int) -> int | None:
    """Where ``step`` is in ``steps`` (ascending step numbers, thinned or not); None if not
    there. A recent step is found at once: the rows after it are whole."""
    at = len(steps) - 1 - (int(steps[-1]) - step) if steps else -1
    if 0 <= at < len(steps) and steps[at] == step:
        return at
    at = bisect_left(steps, step)
    return at if at < len(steps) and steps[at] == step else None
