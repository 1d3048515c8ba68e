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
dims, one of the first two of size 1, the last the input's features) and no children but
dropout, whose input and output share a 3-dim shape, has what it added read: its output (times
1 - p where its dropout dropped, over the kept values) less its input (or the input times
sqrt(D), a scale some put inside the module) is compared with the table's first rows laid along
the input's dim that the table runs along. Where they agree (one host read at the step's end)
and that dim is the batch's (the model's attention layers are all ``batch_first`` one way, or
else the DataLoader's batch size is that dim's size and not the other's), the step counts; 3
sampled steps in a row make the finding.
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
        self.batch_dim: int | None = None  # the models' attention layers' (None: not all alike)
        self.tables: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        # this step's tables read: (module, dim they run along, input shape, error, where)
        self.added: list[tuple[str, int, list[int], torch.Tensor, str]] = []
        self.steps = 0  # sampled steps in a row with a table added along the batch's dim
        self.said = False

    def watch(self, modules: list[nn.Module]) -> None:
        """The watched models' modules: their attention layers (``nn.MultiheadAttention``, in
        every ``nn.Transformer*`` layer) tell the batch's dim."""
        flags = {bool(m.batch_first) for m in modules if isinstance(m, nn.MultiheadAttention)}
        self.batch_dim = (0 if flags == {True} else 1) if len(flags) == 1 else None

    def begin_step(self) -> None:
        self.added = []

    def note(self, name: str, module: nn.Module, inputs: Any, output: Any) -> None:
        """A module's forward on a sampled step: one that holds a position table is read."""
        if self.said or len(self.added) >= TABLES:
            return
        table = self._table(module)
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if not table or not isinstance(x, torch.Tensor) or not isinstance(output, torch.Tensor):
            return
        rows = getattr(module, table)  # [L, 1, D] or [1, L, D]
        if x.dim() != 3 or output.shape != x.shape or x.shape[2] != rows.shape[2]:
            return
        along = 0 if rows.shape[1] == 1 else 1  # the dim of x the table's rows run along
        n = x.shape[along]
        if x.shape[1 - along] < 2 or rows.shape[along] < n or not x.is_floating_point():
            return
        signal = rows.narrow(along, 0, n).detach().float()  # broadcast over the other dim
        kept, scale = output.detach().float(), 1.0
        dropouts = [m for m in module.children() if isinstance(m, nn.Dropout)]
        if dropouts and module.training and dropouts[0].p > 0:
            scale = 1 - dropouts[0].p
        x = x.detach().float()
        errors = []
        for factor in (1.0, math.sqrt(x.shape[2])):
            added = kept * scale - x * factor
            off = (added - signal).abs()
            errors.append(torch.where(kept != 0, off, 0).amax())
        size = signal.abs().amax().clamp_min(1e-12)
        error = torch.stack(errors).amin() / size
        layer = f"{name} ({type(module).__name__}.{table})"
        self.added.append((layer, along, list(x.shape), error, sites.definition_site(module)))

    def _table(self, module: nn.Module) -> str:
        """The name of ``module``'s own position table, or "" (looked up once a module)."""
        name = self.tables.get(module)
        if name is None:
            name = ""
            if all(isinstance(m, nn.Dropout) for m in module.children()):
                own = {**module._parameters, **module._buffers}
                for key, t in own.items():
                    if (
                        t is not None
                        and t.dim() == 3
                        and 1 in t.shape[:2]
                        and t.shape[:2] != (1, 1)
                    ):
                        name = key
                        break
            self.tables[module] = name
        return name

    def judge(self, batch_size: int | None) -> None:
        """At the sampled step's end (one host read); ``batch_size``: the newest DataLoader's."""
        added, self.added = self.added, []
        if self.said or not added:
            return
        errors = torch.stack([a[3].to(added[0][3].device) for a in added]).tolist()
        by_batch = [
            a
            for a, error in zip(added, errors, strict=True)
            if error <= TOLERANCE and self._batch_dim(a[2], batch_size) == a[1]
        ]
        self.steps = self.steps + 1 if by_batch else 0
        if self.steps >= STEPS:
            self.said = True
            layer, along, shape, _, where = by_batch[0]
            self.add(position_signal_by_batch(layer, along, shape, self.steps, where))

    def _batch_dim(self, shape: list[int], batch_size: int | None) -> int | None:
        """Which of the first two dims of an input of ``shape`` is the batch's: the attention
        layers' ``batch_first``, else the one the DataLoader's batch size is (None: unknown)."""
        if self.batch_dim is not None:
            return self.batch_dim
        if batch_size and shape[0] != shape[1]:
            return 0 if shape[0] == batch_size else 1 if shape[1] == batch_size else None
        return None


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
        "their order (a table laid out [max_len, 1, D] for [T, B, D] input, given [B, T, D])",
        evidence={"layer": layer, "dim": along, "shape": shape, "steps": steps},
    )
    found.where = where or layer
    return found
