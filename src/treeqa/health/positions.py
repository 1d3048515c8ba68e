"""A table of position signals added along the batch's dim (``position-signal-by-batch``).

PyTorch's transformer tutorial keeps its sinusoidal signal as a buffer ``pe`` of
``[max_len, 1, d_model]`` and adds ``pe[:x.size(0)]`` to a time-first ``[T, B, D]`` input: each
position gets its row, the same for every sequence. Given a batch-first ``[B, T, D]`` input
(``batch_first=True`` layers), the same line adds ``pe[:B]``: each *sequence* gets one row, the
same at every position, and the model is told nothing of order (a probe that asks which of two
tokens comes first: 0.51 against 0.95 after 1,000 steps). A ``[1, max_len, D]`` table sliced
along dim 1 of a time-first input does the same. Nothing fails while the table is longer than
the batch.

On sampled steps, a module of the script's own that holds a table (a parameter, buffer or
tensor attribute of [L, 1, D], [1, L, D] or [L, D]), given a 3-dim floating tensor (copied
before its forward: ``x += pe`` changes it) and returning one of its shape, is read for each of
the input's first two dims the table may run along: its output is fitted as ``a * input + c *
table rows`` over its nonzero values (``fitted``: a scale inside, dropout and a learned factor
on the table are such factors). An exact fit of rows not all alike, with |c| of 0.05 or more,
along the batch's dim makes the step count (one host read at its end); 3 sampled steps in a
row make the finding. The batch's dim is read off an ``nn.MultiheadAttention`` of the step
given the same two dims (in either order: a transpose between is read as such), else one whose
batch size is one of them, else the DataLoader's batch size when it drew this step's batch (a
warning then: a sequence as long as the loader's batch reads the same).
"""

from __future__ import annotations

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
"""How far the output may be from the fit of input and table, past its dtype's rounding,
relative to the table's largest value as added."""
SCALE = 0.05
"""The least factor the table is added with for it to count (a table scaled to nothing adds
no position to speak of)."""


class PositionTables:
    """``add``: where the finding goes (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.tables: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        # this step's tables read: (module, dim they run along, input shape, the fit's
        # [error, spread, |c|], where its class is defined)
        self.added: list[tuple[str, int, list[int], torch.Tensor, str]] = []
        # this step's nn.MultiheadAttention calls: their queries' first two dims, batch_first
        self.attended: set[tuple[int, int, bool]] = set()
        self.given: dict[int, torch.Tensor] = {}  # the inputs of this step's table modules
        # the DataLoader batches drawn by the last sampled step's end (newest iterator, count)
        self.drawn: tuple[int, int] = (0, -1)
        self.steps = 0  # sampled steps in a row with a table added along the batch's dim
        self.said = False

    def begin_step(self) -> None:
        self.added, self.attended, self.given = [], set(), {}

    def before(self, module: nn.Module, args: Any) -> None:
        """A module's forward is about to run on a sampled step: one that holds a table keeps
        a copy of its input as given (an add in place, ``x += pe``, changes that tensor)."""
        x = args[0] if isinstance(args, tuple) and args else None
        if self.said or not isinstance(x, torch.Tensor) or x.dim() != 3:
            return
        if x.is_floating_point() and self._table(module) and len(self.given) < TABLES:
            self.given[id(module)] = x.detach().clone()

    def note(self, name: str, module: nn.Module, inputs: Any, output: Any) -> None:
        """A module's forward on a sampled step: one that holds a position table is read, and
        an attention layer's input tells which dim is the batch's."""
        if self.said:
            return
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        x = self.given.pop(id(module), x)
        if isinstance(module, nn.MultiheadAttention):
            if isinstance(x, torch.Tensor) and x.dim() == 3:
                self.attended.add((x.shape[0], x.shape[1], bool(module.batch_first)))
            return
        table = self._table(module)
        out = output[0] if isinstance(output, tuple) and output else output
        if not table or not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
            return
        rows = getattr(module, table)  # [L, 1, D], [1, L, D] or [L, D]
        if x.dim() != 3 or out.shape != x.shape or x.shape[2] != rows.shape[-1]:
            return
        if not x.is_floating_point():
            return
        for along in (0, 1):  # the dim of x the table's rows may run along
            n, length = x.shape[along], rows.shape[along] if rows.dim() == 3 else rows.shape[0]
            if rows.dim() == 3 and rows.shape[along] == 1 or len(self.added) >= TABLES:
                continue
            # (a learned table of exactly n rows is one a row of the batch: a series' own)
            own = length == n and isinstance(rows, nn.Parameter)
            if x.shape[1 - along] < 2 or length < n or own:
                continue
            if rows.dim() == 3:
                signal = rows.narrow(along, 0, n)
            else:
                signal = rows[:n].unsqueeze(1 - along)
            read = fitted(x, out, signal.detach())
            layer = f"{name} ({type(module).__name__}.{table})"
            self.added.append((layer, along, list(x.shape), read, sites.definition_site(module)))

    def _table(self, module: nn.Module) -> str:
        """The name of ``module``'s own position table, or "" (looked up once a module)."""
        name = self.tables.get(module)
        if name is None:
            name = self.tables[module] = own_table(module)
        return name

    def judge(self, batch_size: int | None, drawn: tuple[int, int]) -> None:
        """At the sampled step's end (one host read); ``batch_size``: the newest DataLoader's,
        whose newest iterator (its id) has given ``drawn[1]`` batches."""
        added, self.added = self.added, []
        fresh, self.drawn = drawn != self.drawn, drawn
        if self.said or not added:
            return
        reads = torch.stack([a[3].to(added[0][3].device) for a in added]).tolist()
        by_batch = []
        for a, (error, spread, scale) in zip(added, reads, strict=True):
            batch, by_loader = self._batch_dim(a[2], batch_size if fresh else None)
            if error <= TOLERANCE < spread and scale >= SCALE and batch == a[1]:
                by_batch.append((a, by_loader))
        self.steps = self.steps + 1 if by_batch else 0
        if self.steps >= STEPS:
            self.said = True
            (layer, along, shape, _, where), by_loader = by_batch[0]
            found = position_signal_by_batch(layer, along, shape, self.steps, where, by_loader)
            self.add(found)

    def _batch_dim(self, shape: list[int], batch_size: int | None) -> tuple[int | None, bool]:
        """Which of the first two dims of an input of ``shape`` is the batch's (None: unknown),
        and whether the DataLoader said so. Where an ``nn.MultiheadAttention`` of the step was
        given the same two dims, the one its ``batch_first`` says (in the other order, a
        transpose between the table and the layer, the other one; where the two are equal, in
        the same order). Else the one that is the batch size of such a layer given other dims
        (a CLS token added, a pooling query of length 1), or else of the DataLoader, when it
        drew a batch since the last sampled step (a validation loader's is not this step's)."""
        first, second = shape[:2]
        for same in (True, False):
            for a, b, batch_first in self.attended:
                if (a, b) == ((first, second) if same else (second, first)):
                    return (0 if batch_first else 1) if same else (1 if batch_first else 0), False
        if first == second:
            return None, False
        batches = {(a if batch_first else b) for a, b, batch_first in self.attended}
        for sizes, by_loader in ((batches, False), ({batch_size} if batch_size else set(), True)):
            if (first in sizes) != (second in sizes):  # one of the two dims only
                return (0 if first in sizes else 1), by_loader
        return None, False


LAYOUTS = (
    "a table laid out [max_len, 1, D] for [T, B, D] input, given [B, T, D]",
    "a table laid out [1, max_len, D] for [B, T, D] input, given [T, B, D]",
)
"""What each way of adding a table along the batch's dim comes from, by the dim it runs along."""


def own_table(module: nn.Module) -> str:
    """The name of a parameter, buffer or tensor attribute of ``module`` that may be a table
    of position signals: [L, 1, D] or [1, L, D] (L > 1), or [L, D]; "" if none (torch's own
    layers, whose 2-dim weights are no such tables, hold none)."""
    if type(module).__module__.startswith("torch."):
        return ""
    attributes = {k: v for k, v in vars(module).items() if isinstance(v, torch.Tensor)}
    for key, t in {**module._parameters, **module._buffers, **attributes}.items():
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            continue
        if t.dim() == 2 and min(t.shape) > 1 or t.dim() == 3 and _laid_out(t.shape):
            return key
    return ""


def _laid_out(shape: torch.Size) -> bool:
    """A 3-dim table laid out [L, 1, D] or [1, L, D], L > 1."""
    return 1 in shape[:2] and max(shape[:2]) > 1


def fitted(x: torch.Tensor, out: torch.Tensor, signal: torch.Tensor) -> torch.Tensor:
    """How well ``out`` [A, B, D] is ``a * x + c * signal`` (``signal`` broadcast to it) over
    its nonzero values (dropout's zeros left out): a and c by least squares (the input scaled
    by sqrt(D), dropout's 1 / (1 - p) and a learned scale on the table are all such factors).
    [the largest miss, less the rounding of ``out``'s dtype, over |c| times the table's
    largest value; how far the table's rows differ from its first, over its largest value;
    |c|]. On the device, no host read (a singular fit gives NaN)."""
    o, v, t = (u.detach().double() for u in (out, x, signal.expand_as(out)))
    kept = o != 0
    v, t, o = (torch.where(kept, u, 0) for u in (v, t, o))
    vv, vt, tt, vo, to = ((a * b).sum() for a, b in ((v, v), (v, t), (t, t), (v, o), (t, o)))
    det = vv * tt - vt * vt
    a, c = (vo * tt - vt * to) / det, (vv * to - vt * vo) / det
    rounding = 4 * torch.finfo(out.dtype).eps * o.abs().amax()
    miss = torch.where(kept, (o - a * v - c * t).abs(), 0).amax() - rounding
    size = signal.detach().double().abs().amax()
    first = signal.narrow(0, 0, 1) if signal.shape[0] > 1 else signal.narrow(1, 0, 1)
    spread = (signal - first).detach().double().abs().amax() / size
    return torch.stack([miss / (c.abs() * size), spread, c.abs()])


def position_signal_by_batch(
    layer: str, along: int, shape: list[int], steps: int, where: str, by_loader: bool = False
) -> Finding:
    """``layer`` added its table's rows along dim ``along`` of a ``shape`` input, the batch's
    dim, on ``steps`` sampled steps in a row; ``by_loader``: the DataLoader's batch size, not
    an attention layer, told that dim (a warning, not an error: a sequence as long as the
    loader's batch reads the same)."""
    positions = shape[1 - along]
    said = (
        f"{layer} adds its position table along dim {along} of its {shape} input, which is the "
        f"batch's ({steps} sampled steps in a row): each sequence gets one row of the table, "
        f"the same at all of its {positions} positions, so the model is told nothing of "
        f"their order ({LAYOUTS[along]})"
    )
    if by_loader:
        said += (
            f"; dim {along} was read as the batch's for holding the DataLoader's batch size, "
            "no attention layer showing the layout: sequences as long as the loader's batch "
            "read the same"
        )
    found = Finding(
        "position-signal-by-batch",
        "warning" if by_loader else "error",
        said,
        evidence={
            "layer": layer,
            "dim": along,
            "shape": shape,
            "steps": steps,
            "batch_dim_from": "DataLoader" if by_loader else "attention",
        },
    )
    found.where = where or layer
    return found
