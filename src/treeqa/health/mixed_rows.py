"""``rows-mixed-across-batch``: in eval mode, a model's output for one example changes with the
other examples of its batch.

A model scores each example by itself once it is in eval mode (batch norm reads its running
statistics, dropout is off), so scoring a batch or any part of it gives each row the same
output. An operation over the batch's dim breaks that: an ``nn.TransformerEncoder`` (or
``nn.MultiheadAttention``) built with the default ``batch_first=False`` and given
``[batch, time, features]`` attends over the examples of the batch instead of a sentence's
tokens (whose words then never meet); ``x - x.mean(0)``, ``F.normalize(h, dim=0)`` or a softmax
over dim 0 mix the rows; a batch norm without running statistics normalises by the batch's.
Nothing fails, the shapes are right; the model learns from other examples' inputs, and its
predictions depend on which examples share a batch.

On a sampled training step whose batch has the DataLoader's batch size B (4 or more) in dim 0 of
a tensor it is given, or (batches sliced by hand, B in dim 0 of its first) whose loss's target
is one value for each of those rows ([B] or [B, 1]), the doctor keeps the forward's arguments;
at the step's end it copies the model (``copy.deepcopy``, without the doctor's hooks; models
over ``MOST_BYTES`` are left alone), puts the copy in eval mode and, without gradients, runs it
on the batch twice, on its last B // 2 rows and on its first (every tensor argument with B rows
in dim 0 cut to those: a sum running over the rows changes the last ones alone, one running
backwards the first). The generator state is put back after, and the copy's prints are dropped.
Each row of a tensor with a batch dim (B or B // 2 rows: dim 0, or the one dim of that size) is
reduced to two numbers (its dot product with fixed weights and its L2 norm, the scale of that
product's change), kept for the model's output and for each submodule's inputs and outputs. The
two full runs must agree (a model that samples, or keeps state from one call to the next, is not
judged); then half or more of the rows the output has in both runs differing by more than
``TOLERANCE`` of their size make the finding. The submodule named is the first (outermost) whose
inputs agree and whose outputs do not, looked into where it is a container or the script's own
class; where none is, the rows mix in the model's own forward, between the last submodule whose
output agrees and the first whose input does not. One batch decides; an undecided one (no batch
dim in the output, a copy that fails) leaves it to the next sampled step, ``TRIES`` at most.
"""

from __future__ import annotations

import contextlib
import copy
import io
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from treeqa.health.draws import tensors_in
from treeqa.health.findings import Finding

MIN_ROWS = 4
"""Batches of fewer rows are not judged (half of them is too few to tell)."""
MOST_BYTES = 1 << 30
"""Models whose parameters and buffers take more than this are not copied."""
TOLERANCE = 1e-3
"""A row differs when its dot products differ by more than this share of its L2 norm."""
NOISE = 1e-4
"""Rows agree (a layer's inputs, to tell where they mix) when none differs by more."""
MIXED = 0.5
"""The share of a tensor's rows that must differ for the tensor to be mixed."""
TRIES = 3
"""Batches tried at most before the check gives up (each one undecided)."""
DEPTH = 4
"""Tuples, lists and dicts looked into for tensors (a forward's (args, kwargs), a dict batch in
them; an output's hidden states in a ModelOutput)."""
ATTENTION = (
    nn.MultiheadAttention,
    nn.TransformerEncoder,
    nn.TransformerEncoderLayer,
    nn.TransformerDecoder,
    nn.TransformerDecoderLayer,
    nn.Transformer,
)
CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
OVER_BATCH = (
    "an operation over the batch's dim (a mean, sum, max, norm or softmax over dim 0, or a "
    "reshape across it)"
)

Prints = list["Rows | None"]
"""A forward's tensors, each as its rows' two numbers (None: a tensor without a batch dim)."""


@dataclass
class Rows:
    """A tensor's rows, each reduced to (dot product with fixed weights, L2 norm): [rows, 2]
    float64 on the CPU; ``dim``: its batch dim; ``width``: the values a row holds."""

    dim: int
    width: int
    numbers: torch.Tensor


@dataclass
class Call:
    """A submodule's call in a run of the copy: its name, its inputs' and outputs' rows."""

    name: str
    module: nn.Module
    inputs: Prints
    outputs: Prints | None = None


class MixedRows:
    """``add``: where the finding goes; ``batch_size()``: the rows of the batch drawn last
    (its dataset indices, on a sampled step) or else its DataLoader's batch size."""

    def __init__(self, add: Callable[[Finding], None], batch_size: Callable[[], int | None]):
        self.add, self.batch_size = add, batch_size
        # the sampled step's training forward: (model, its arguments, their batch size)
        self.kept: tuple[weakref.ref[nn.Module], tuple[Any, ...], dict[str, Any], int] | None
        self.kept = None
        self.rows_known = False  # the batch kept has its rows in dim 0, as many as it says
        self.tries = 0
        self.done = False

    def forward(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A sampled training forward of a trained model (the doctor's root pre-hook)."""
        if self.done or self.kept is not None:
            return
        tensors = [t for t in tensors_in((args, kwargs), DEPTH) if t.dim() >= 1]
        size = self.batch_size()
        batch = next((t for t in tensors if t.shape[0] == size), None)  # (positions first)
        if batch is None and tensors:
            batch = tensors[0]
        if (
            batch is None
            or batch.shape[0] < MIN_ROWS
            or list(batch.shape).count(batch.shape[0]) > 1
        ):
            return  # (too few rows; or a square batch: [T, B] time first with T = B, or not)
        rows = batch.shape[0]
        self.kept = (weakref.ref(model), args, kwargs, rows)
        self.rows_known = rows == size

    def target(self, target: Any, input: Any) -> None:
        """A sampled training loss's target (the loss wrappers'): one value for each row of
        the batch kept ([B] or [B, 1]) tells that its rows are dim 0 (batches sliced by
        hand; a time-first tagger's [T, B] targets do not)."""
        kept = self.kept
        if kept is None or self.rows_known or not isinstance(target, torch.Tensor):
            return
        rows = target.shape[0] if target.dim() in (1, 2) else 0
        self.rows_known = rows == kept[3] and target[0].numel() == 1

    def stepped(self, ready: bool) -> None:
        """The sampled step ended (the monitor's hooks are off): judge the batch kept, where
        ``ready`` (no hook of the doctor's sees every module's forward)."""
        kept, self.kept = self.kept, None
        if kept is None or self.done or not ready or not self.rows_known or _recording():
            return
        ref, args, kwargs, rows = kept
        model = ref()
        if model is None:
            return
        self.tries += 1
        self.done = self.tries >= TRIES
        decided, found = judge(model, args, kwargs, rows)
        self.done = self.done or decided
        if found is not None:
            self.add(found)


def judge(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], rows: int
) -> tuple[bool, Finding | None]:
    """(whether the batch decides, the finding where the rows mix)."""
    inner = _unwrapped(model)
    if _bytes(inner) > MOST_BYTES:
        return True, None
    half = rows // 2
    # the last rows (a sum running over the batch's rows changes the last ones alone), then
    # the first (one running backwards, the first)
    halves = (slice(rows - half, None), slice(0, half))
    state = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            twin = copy.deepcopy(inner)
            twin.eval()
            first = _prints(twin(*args, **kwargs), rows)
            calls = _recorded(twin, args, kwargs, rows)
            parts = [
                _recorded(twin, _cut(args, rows, kept), _cut(kwargs, rows, kept), half)
                for kept in halves
            ]
    except Exception:  # a model that cannot be copied, or run on half its batch
        return False, None
    finally:
        torch.set_rng_state(state)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
    full = calls[0].outputs
    if full is None or _differs(first, full, slice(None)) is not False:
        return False, None  # (a model that samples or keeps state from call to call)
    decided = False
    for part, kept in zip(parts, halves, strict=True):
        halved = part[0].outputs or []
        mixed = _differs(full, halved, kept)
        if mixed:
            return True, _found(inner, calls, part, kept, half, _share(full, halved, kept))
        decided = decided or mixed is not None
    return decided, None


def _recorded(
    twin: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], rows: int
) -> list[Call]:
    """Every call of the copy's modules (the copy itself first) in the order they began."""
    calls: list[Call] = []
    open_calls: dict[int, list[Call]] = {}

    def before(name: str, module: nn.Module, inputs: Any, given: Any) -> None:
        call = Call(name, module, _prints((inputs, given), rows))
        calls.append(call)
        open_calls.setdefault(id(module), []).append(call)

    def after(module: nn.Module, inputs: Any, given: Any, output: Any) -> None:
        stack = open_calls.get(id(module))
        if stack:
            stack.pop().outputs = _prints(output, rows)

    handles = []
    try:
        for name, module in twin.named_modules():
            hook = _Before(before, name)
            handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
            handles.append(module.register_forward_hook(after, with_kwargs=True))
        twin(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return calls


class _Before:
    """A pre-hook that passes the module's name on."""

    def __init__(self, fn: Callable[..., None], name: str):
        self.fn, self.name = fn, name

    def __call__(self, module: nn.Module, inputs: Any, given: Any) -> None:
        self.fn(self.name, module, inputs, given)


def _found(
    model: nn.Module, calls: list[Call], part: list[Call], rows: slice, half: int, share: float
) -> Finding:
    """The finding for a model whose output rows mix: the submodule where they do."""
    halves: dict[tuple[str, int], Call] = {}
    seen: dict[str, int] = {}
    for call in part:
        k = seen[call.name] = seen.get(call.name, -1) + 1
        halves[(call.name, k)] = call
    # each call: whether its inputs agree (to float noise), its outputs mix, its outputs agree
    states: list[tuple[Call, bool | None, bool | None, bool | None]] = []
    seen.clear()
    for call in calls[1:]:
        k = seen[call.name] = seen.get(call.name, -1) + 1
        other = halves.get((call.name, k))
        if other is not None:
            outputs, others = call.outputs or [], other.outputs or []
            given = _agree(call.inputs, other.inputs, rows)
            states.append(
                (call, given, _differs(outputs, others, rows), _agree(outputs, others, rows))
            )
    culprit = next((c for c, given, out, _ in states if given and out), None)
    while culprit is not None and _looked_into(culprit.module):
        prefix = culprit.name + "."
        inner = [c for c, given, out, _ in states if c.name.startswith(prefix) and given and out]
        if not inner:
            break
        culprit = inner[0]
    if culprit is not None:
        layer = f"{culprit.name} ({type(culprit.module).__name__})"
        return rows_mixed(type(model).__name__, layer, _why(culprit.module), half, share)
    before = next((c for c, given, _, _ in states if given is False), None)
    after = None
    for c, _, _, same in states:
        if before is not None and c is before:
            break
        if same:
            after = c
    place = _between(type(model).__name__, after, before)
    return rows_mixed(type(model).__name__, place, OVER_BATCH, half, share)


def _looked_into(module: nn.Module) -> bool:
    """A module whose mixing is told by the layer inside it: a container, or a class of the
    script's own (not torch's)."""
    own = not type(module).__module__.startswith("torch.")
    return isinstance(module, CONTAINERS) or own


def _why(module: nn.Module) -> str:
    """What in ``module`` mixes the rows, where its kind tells."""
    if isinstance(module, ATTENTION):
        late = [m for m in module.modules() if isinstance(m, nn.MultiheadAttention)]
        if late and not late[0].batch_first:
            return (
                "built with batch_first=False, it reads dim 0 of its [batch, time, features] "
                "input as the sequence: each position attends over the other examples of the "
                "batch, and the tokens of one example never meet"
            )
    if isinstance(module, nn.RNNBase) and not module.batch_first:
        return "built with batch_first=False, it runs its recurrence across the batch's examples"
    if isinstance(module, nn.modules.batchnorm._NormBase) and module.running_mean is None:
        return (
            "built with track_running_stats=False, it normalises by the batch's own "
            "statistics in eval mode too"
        )
    return f"in its forward, {OVER_BATCH}"


def _between(model: str, after: Call | None, before: Call | None) -> str:
    """Where in ``model``'s own forward the rows mix."""
    if after is not None and before is not None:
        return f"{model}.forward, between `{after.name}` and `{before.name}`"
    if before is not None:
        return f"{model}.forward, before `{before.name}`"
    return f"{model}.forward" + (f", after `{after.name}`" if after is not None else "")


def _recording() -> bool:
    """Whether the copy's forwards would be recorded as the script's: by a profiler (the
    script's own, or the doctor's window) or a dispatch mode (a FLOP counter)."""
    return torch._C._autograd._profiler_enabled() or bool(_get_current_dispatch_mode_stack())


def _unwrapped(model: nn.Module) -> nn.Module:
    """The module itself: inside ``torch.compile``'s wrapper or a data-parallel one."""
    inner = getattr(model, "_orig_mod", None)
    if isinstance(inner, nn.Module):
        return inner
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, nn.Module) else model


def _bytes(model: nn.Module) -> int:
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def _cut(value: Any, rows: int, part: slice) -> Any:
    """``value`` with each tensor of ``rows`` rows in dim 0 cut to the rows ``part``."""
    if isinstance(value, torch.Tensor):
        return value[part] if value.dim() >= 1 and value.shape[0] == rows else value
    if isinstance(value, dict):
        return {k: _cut(v, rows, part) for k, v in value.items()}
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(_cut(v, rows, part) for v in value)
    return value


def _prints(value: Any, rows: int) -> Prints:
    return [_rows(t, rows) for t in tensors_in(value, DEPTH)]


def _rows(t: torch.Tensor, rows: int) -> Rows | None:
    """A tensor's rows reduced to two numbers each, along its batch dim (dim 0 when it has
    ``rows``, else the one dim that has)."""
    if t.dim() == 0 or t.is_complex() or t.is_sparse or t.numel() == 0:
        return None
    if t.shape[0] == rows:
        dim = 0
    else:
        dims = [d for d, n in enumerate(t.shape) if n == rows]
        if len(dims) != 1:
            return None
        dim = dims[0]
    x = t.detach().movedim(dim, 0).reshape(rows, -1).double()
    width = x.shape[1]
    weights = torch.sin(torch.arange(width, dtype=torch.float64, device=x.device) * 0.618 + 1)
    numbers = torch.stack([x @ weights, x.norm(dim=1)], 1).cpu()
    return Rows(dim, width, numbers)


def _tensor_differs(a: Rows | None, b: Rows | None, part: slice) -> bool | None:
    """Whether the rows ``part`` of ``a`` and ``b`` differ (None: not comparable)."""
    share = _rows_differing(a, b, part)
    return None if share is None else share >= MIXED


def _rows_differing(a: Rows | None, b: Rows | None, part: slice) -> float | None:
    """The share of the rows ``part`` of ``a`` and ``b`` that differ (None: not
    comparable)."""
    changes = _changes(a, b, part)
    return None if changes is None else float((changes > TOLERANCE).double().mean())


def _changes(a: Rows | None, b: Rows | None, part: slice) -> torch.Tensor | None:
    """How much each row of ``part`` (the rows scored in both runs) changed: its dot
    product's change over its L2 norm."""
    if a is None or b is None or a.dim != b.dim or a.width != b.width:
        return None
    x = a.numbers[part]  # (a full run's rows; the other run's are those rows alone, or all)
    y = b.numbers if b.numbers.shape[0] == x.shape[0] else b.numbers[part]
    if x.shape[0] != y.shape[0] or x.shape[0] == 0:
        return None
    scale = (x[:, 1] + y[:, 1]).clamp(min=1e-30) / 2
    return (x[:, 0] - y[:, 0]).abs() / scale


def _differs(a: Prints, b: Prints, part: slice) -> bool | None:
    """Whether a forward's output rows differ between two runs: any tensor of it does (None:
    none can be compared)."""
    verdicts = [_tensor_differs(x, y, part) for x, y in zip(a, b, strict=False)]
    known = [v for v in verdicts if v is not None]
    return any(known) if known else None


def _agree(a: Prints, b: Prints, part: slice) -> bool | None:
    """Whether every row of a forward's tensors agrees between two runs to float noise
    (``NOISE``; None: none can be compared)."""
    changes = [_changes(x, y, part) for x, y in zip(a, b, strict=False)]
    known = [float(c.max()) for c in changes if c is not None]
    return max(known) <= NOISE if known else None


def _share(a: Prints, b: Prints, part: slice) -> float:
    shares = [_rows_differing(x, y, part) for x, y in zip(a, b, strict=False)]
    return max((s for s in shares if s is not None), default=0.0)


def rows_mixed(model: str, layer: str, why: str, rows: int, share: float) -> Finding:
    """In eval mode, ``model``'s output for ``share`` of ``rows`` examples changed when they
    were scored without the rest of their batch; ``layer`` mixes the rows (``why``)."""
    norm = "track_running_stats=False" in why
    return Finding(
        "rows-mixed-across-batch",
        "info" if norm else "error",
        f"in eval mode, {model}'s output for an example changes with the other examples in its "
        f"batch: {rows} rows scored without the rest of their batch got other outputs for "
        f"{share:.0%} of them. They mix at {layer}: {why}. The model learns from other "
        "examples' inputs, and its predictions depend on which examples share a batch (the "
        "evaluation's order and batch size)",
        where=layer,
        evidence={"model": model, "layer": layer, "rows": rows, "rows_changed": round(share, 3)},
    )
