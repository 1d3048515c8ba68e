"""A table of position signals added along the batch's dim (``position-signal-by-batch``).

PyTorch's transformer tutorial keeps its sinusoidal signal as a buffer ``pe`` of
``[max_len, 1, d_model]`` and adds ``pe[:x.size(0)]`` to a time-first ``[T, B, D]`` input: each
position gets its row, the same for every sequence. Given a batch-first ``[B, T, D]`` input
(``batch_first=True`` layers), the same line adds ``pe[:B]``: each *sequence* gets one row, the
same at every position, and the model is told nothing of order (a probe that asks which of two
tokens comes first: 0.51 against 0.95 after 1,000 steps). A ``[1, max_len, D]`` table sliced
along dim 1 of a time-first input does the same. Nothing fails while the table is longer than
the batch.

On sampled steps, a module that holds such a table (a buffer or parameter of its own, of 3
dims, one of the first two of size 1, the last the input's features, longer than the dim it
runs along: a table of exactly the batch's rows is one a row, a series' or a speaker's own) and
no children but dropout, whose input and output share a 3-dim shape, has what it added read:
its output (times 1 - p where its dropout dropped, over the kept values) less its input (or the
input times sqrt(D), a scale some put inside the module) is compared with the table's first
rows laid along the input's dim that the table runs along (rows all alike, a table of zeros,
say nothing of position and are not judged). Where they agree (one host read at the step's end)
and that dim is the batch's, the step counts; 3 sampled steps in a row make the finding. The
batch's dim is read off an ``nn.MultiheadAttention`` of the same step given the same two dims,
in either order (a transpose between the table and the attention is read as such); where the
step ran no attention layer, off the DataLoader's batch size, when a batch of it was drawn
since the last sampled step.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding

STEPS = 3
"""Sampled steps in a row with a table added along the batch's dim."""
TABLES = 8
"""Modules with a position table read a sampled step, at most."""
TOLERANCE = 1e-4
"""How far the added signal may be from the table's rows, relative to the table's largest
value (the dropout's rescaling rounds)."""


class PositionTables:
    """``add``: where the finding goes (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.tables: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        # this step's tables read: (module, dim they run along, input shape, [error, spread],
        # where its class is defined)
        self.added: list[tuple[str, int, list[int], torch.Tensor, str]] = []
        # this step's nn.MultiheadAttention calls: (their queries' length, batch)
        self.attended: set[tuple[int, int]] = set()
        # the DataLoader batches drawn by the last sampled step's end (newest iterator, count)
        self.drawn: tuple[int, int] = (0, -1)
        self.steps = 0  # sampled steps in a row with a table added along the batch's dim
        self.said = False

    def begin_step(self) -> None:
        self.added, self.attended = [], set()

    def note(self, name: str, module: nn.Module, inputs: Any, output: Any) -> None:
        """A module's forward on a sampled step: one that holds a position table is read, and
        an attention layer's input tells which dim is the batch's."""
        if self.said:
            return
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if isinstance(module, nn.MultiheadAttention):
            if isinstance(x, torch.Tensor) and x.dim() == 3:
                length, batch = x.shape[:2] if not module.batch_first else x.shape[1::-1]
                self.attended.add((length, batch))
            return
        table = self._table(module)
        if not table or not isinstance(x, torch.Tensor) or not isinstance(output, torch.Tensor):
            return
        rows = getattr(module, table)  # [L, 1, D] or [1, L, D]
        if x.dim() != 3 or output.shape != x.shape or x.shape[2] != rows.shape[2]:
            return
        along = 0 if rows.shape[1] == 1 else 1  # the dim of x the table's rows run along
        n = x.shape[along]
        # (a table of exactly n rows is one a row of the batch: a series' or a speaker's own)
        if x.shape[1 - along] < 2 or rows.shape[along] <= n or not x.is_floating_point():
            return
        if len(self.added) >= TABLES:
            return
        signal = rows.narrow(along, 0, n).detach().float()  # broadcast over the other dim
        kept, scale = output.detach().float(), 1.0
        dropouts = [m for m in module.children() if isinstance(m, nn.Dropout)]
        if dropouts and module.training and dropouts[0].p > 0:
            scale = 1 - dropouts[0].p
        x = x.detach().float()
        errors = []
        for factor in (1.0, math.sqrt(x.shape[2])):
            off = (kept * scale - x * factor - signal).abs()
            errors.append(torch.where(kept != 0, off, 0).amax())
        size = signal.abs().amax().clamp_min(1e-12)
        spread = (signal - signal.narrow(along, 0, 1)).abs().amax() / size  # 0: rows alike
        read = torch.stack([torch.stack(errors).amin() / size, spread])
        layer = f"{name} ({type(module).__name__}.{table})"
        self.added.append((layer, along, list(x.shape), read, sites.definition_site(module)))

    def _table(self, module: nn.Module) -> str:
        """The name of ``module``'s own position table, or "" (looked up once a module)."""
        name = self.tables.get(module)
        if name is None:
            name = ""
            if all(isinstance(m, nn.Dropout) for m in module.children()):
                own = {**module._parameters, **module._buffers}
                for key, t in own.items():
                    if t is not None and t.dim() == 3 and 1 in t.shape[:2] and max(t.shape[:2]) > 1:
                        name = key
                        break
            self.tables[module] = name
        return name

    def judge(self, batch_size: int | None, drawn: tuple[int, int]) -> None:
        """At the sampled step's end (one host read); ``batch_size``: the newest DataLoader's,
        whose newest iterator (its id) has given ``drawn[1]`` batches."""
        added, self.added = self.added, []
        fresh, self.drawn = drawn != self.drawn, drawn
        if self.said or not added:
            return
        reads = torch.stack([a[3].to(added[0][3].device) for a in added]).tolist()
        by_batch = [
            a
            for a, (error, spread) in zip(added, reads, strict=True)
            if error <= TOLERANCE < spread
            and self._batch_dim(a[2], batch_size if fresh else None) == a[1]
        ]
        self.steps = self.steps + 1 if by_batch else 0
        if self.steps >= STEPS:
            self.said = True
            layer, along, shape, _, where = by_batch[0]
            self.add(position_signal_by_batch(layer, along, shape, self.steps, where))

    def _batch_dim(self, shape: list[int], batch_size: int | None) -> int | None:
        """Which of the first two dims of an input of ``shape`` is the batch's (None: unknown):
        where an ``nn.MultiheadAttention`` of the step was given the same two dims, the one
        that is its batch (a transpose between the table and the layer is read); where none
        was, the one the DataLoader's batch size is, when a batch of it was drawn since the
        last sampled step (a validation loader's is not this step's)."""
        first, second = shape[:2]
        if first == second:
            return None
        for length, batch in self.attended:
            if (length, batch) in ((first, second), (second, first)):
                return 0 if batch == first else 1
        if batch_size and not self.attended:
            return 0 if first == batch_size else 1 if second == batch_size else None
        return None


LAYOUTS = (
    "a table laid out [max_len, 1, D] for [T, B, D] input, given [B, T, D]",
    "a table laid out [1, max_len, D] for [B, T, D] input, given [T, B, D]",
)
"""What each way of adding a table along the batch's dim comes from, by the dim it runs along."""


def position_signal_by_batch(
    layer: str, along: int, shape: list[int], steps: int, where: str
) -> Finding:
    """``layer`` added its table's rows along dim ``along`` of a ``shape`` input, the batch's
    dim, on ``steps`` sampled steps in a row."""
    positions = shape[1 - along]
    found = Finding(
        "position-signal-by-batch",
        "error",
        f"{layer} adds its position table along dim {along} of its {shape} input, which is the "
        f"batch's ({steps} sampled steps in a row): each sequence gets one row of the table, "
        f"the same at all of its {positions} positions, so the model is told nothing of "
        f"their order ({LAYOUTS[along]})",
        evidence={"layer": layer, "dim": along, "shape": shape, "steps": steps},
    )
    found.where = where or layer
    return found
