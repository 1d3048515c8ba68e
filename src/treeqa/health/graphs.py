"""Find autograd graphs that outlive their step, and the objects that hold them.

Autograd numbers every graph node it creates (``Node._sequence_nr()``, increasing per thread).
The monitor remembers the number of the loss at each scan, so a node numbered at or below the
previous scan's loss was made before that scan. A graph that still reaches such a node has
outlived a whole interval between scans: it is carried on from step to step and grows. A state
kept with its graph on purpose for a few steps (truncated backpropagation through time, whose
backward runs through the last few chunks) is cut within the interval and is not reported; a
test of "older than two steps" could not tell the two apart. A gc walk finds live tensors whose
``grad_fn`` is that old; ``gc.get_referrers`` and the live stack frames name what keeps them
alive.
"""

from __future__ import annotations

import collections
import gc
import sys
import types
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding

_HERE = str(Path(__file__).parent)
UNKNOWN = "unknown holder"
RECORD_FIELDS = 16
"""The most fields a record in a script's list may have for a tensor in it to be named by the
list (``buffer.append((state, action, q_values))``)."""
# (nn.Buffer, torch 2.5+, returns a plain Tensor: no object's type is ever Buffer)
_TENSOR_TYPES = frozenset({torch.Tensor, nn.Parameter})


def grad_fn(tensor: torch.Tensor) -> Any:
    """``tensor.grad_fn``, or None where autograd refuses to give it: a view among several
    outputs (``torch.split``) whose base was changed in place since. Such a view holds no graph
    a backward could use; FSDP's ``FullyShardedDataParallel`` keeps a module's parameters as
    views of that kind of the flat parameter it fills anew each step."""
    try:
        return tensor.grad_fn
    except RuntimeError:
        return None


def walk(node: Any, most: int, stop: Collection[Any] = ()) -> Iterator[Any]:
    """The autograd nodes of the graph from ``node`` back, breadth first, ``most`` at most
    (``node`` None: none); those in ``stop`` are given and not walked past."""
    seen: set[Any] = set()
    queue = collections.deque([node])
    while queue and len(seen) < most:
        node = queue.popleft()
        if node is None or node in seen:
            continue
        seen.add(node)
        yield node
        if node not in stop:
            queue.extend(child for child, _ in node.next_functions)


def sequence_nr(tensor: torch.Tensor) -> int:
    """The number of ``tensor``'s graph node (-1 for a tensor without one)."""
    fn = grad_fn(tensor)
    return -1 if fn is None else int(fn._sequence_nr())


def next_sequence_nr() -> int:
    """A number at or above every autograd node made so far on this thread (-1 if unknown).

    Read before the first step: graphs numbered at or below it were made before training (an
    initial weight norm kept for a ratio), not by earlier steps.
    """
    with torch.enable_grad():
        probe = torch.zeros((), requires_grad=True) * 1.0
    return -1 if probe.grad_fn is None else int(probe.grad_fn._sequence_nr())  # inference mode


def oldest_node(
    tensor: torch.Tensor, limit: int = 20_000, floor: int = -1, until: int = -1
) -> int | None:
    """The smallest sequence number above ``floor`` in ``tensor``'s graph (walks at most
    ``limit`` nodes; nodes at or below ``floor`` and what they reach are left out), or the
    first found at or below ``until`` (where only whether there is one matters)."""
    fn = tensor.grad_fn
    if fn is None:
        return None
    oldest, seen, todo = int(fn._sequence_nr()), {fn}, [fn]
    while todo and len(seen) < limit:
        node = todo.pop()
        for child, _ in node.next_functions:
            if child is None or child in seen or type(child).__name__ == "AccumulateGrad":
                continue
            seen.add(child)
            seq = int(child._sequence_nr())
            if seq > floor:
                todo.append(child)
                oldest = min(oldest, seq)
                if oldest <= until:
                    return oldest
    return oldest


@dataclass
class Retained:
    """Tensors alive after their step that hold graphs of earlier steps (numbered in
    ``(floor, marker]``): old tensors themselves, or newer ones whose graph reaches old nodes."""

    tensors: int = 0
    scalars: int = 0
    oldest: int | None = None
    reused: bool = False
    holders: dict[str, int] = field(default_factory=dict)
    scalar_holders: dict[str, int] = field(default_factory=dict)
    in_losses: int = 0  # tensors held only from inside the kept scalars' graphs


def _by_age(
    loss: torch.Tensor | None, floor: int, marker: int
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """Every gc-tracked tensor with a graph but ``loss``; and of them, the old (numbered in
    ``(floor, marker]``) and the fresh (above ``marker``)."""
    tensors = [
        o
        for o in gc.get_objects()
        if type(o) in _TENSOR_TYPES and o is not loss and grad_fn(o) is not None
    ]
    old, fresh = [], []
    for t in tensors:
        seq = sequence_nr(t)
        if floor < seq <= marker:
            old.append(t)
        elif seq > marker:
            fresh.append(t)
    return tensors, old, fresh


def _parents(
    roots: list[Any], floor: int, marker: int, limit: int
) -> tuple[dict[Any, list[Any]], list[Any]]:
    """The graph below ``roots`` as child -> parents, and its old nodes (``floor < seq <=
    marker``). The walk stops at old and pre-training nodes (their own inputs are older still)
    and after ``limit`` nodes."""
    parents: dict[Any, list[Any]] = {}
    old: list[Any] = []
    seen, todo = set(roots), list(roots)
    while todo and len(seen) < limit:
        node = todo.pop()
        seq = int(node._sequence_nr())
        if seq <= marker:
            if seq > floor:
                old.append(node)
            continue
        for child, _ in node.next_functions:
            if child is None or type(child).__name__ == "AccumulateGrad":
                continue
            parents.setdefault(child, []).append(node)
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return parents, old


def _above(nodes: Iterable[Any], parents: dict[Any, list[Any]]) -> set[Any]:
    """Every node whose graph contains one of ``nodes`` (the nodes themselves excluded)."""
    out: set[Any] = set()
    todo = list(nodes)
    while todo:
        for parent in parents.get(todo.pop(), ()):
            if parent not in out:
                out.add(parent)
                todo.append(parent)
    return out


def scan(
    marker: int,
    floor: int = -1,
    loss: torch.Tensor | None = None,
    sample: int = 4,
    limit: int = 20_000,
) -> Retained:
    """Walk every gc-tracked tensor for graphs kept since the previous scan: nodes numbered in
    ``(floor, marker]`` (``floor``: the last number before the first step; ``marker``: the loss
    at the previous scan).

    A tensor counts when its own node is that old (a state cached without detach, a list of
    losses) or when it is newer and its graph reaches such a node (``total += loss``, a
    recurrent state carried over), unless its graph runs through another such tensor: then
    that one is the holder (``loss = f(state)``: the state, not the loss). Scalars (one
    element) are counted apart: a running total or a list of losses is
    ``loss-accumulated-with-graph``; anything else is ``graph-retained``. A single old scalar
    (a loss kept once, e.g. the best one) does not grow and is left out. ``loss``: this step's
    loss; ``reused`` says whether its graph reaches the old nodes. Holders are named for at
    most ``sample`` tensors of each kind (referrer walks are slow).
    """
    found = Retained()
    tensors, old, fresh = _by_age(loss, floor, marker)
    if old:
        # Garbage cycles may still hold old graphs; they are no leak. Collect, then look again.
        del tensors, old, fresh
        gc.collect()
        tensors, old, fresh = _by_age(loss, floor, marker)
    # One node object per tensor, held for the walk: a grad_fn's Python object is its identity.
    nodes = [t.grad_fn for t in fresh]
    loss_node = loss.grad_fn if loss is not None else None
    walked = nodes if loss_node is None else [*nodes, loss_node]
    parents, old_nodes = _parents(walked, floor, marker, limit)
    reaching = _above(old_nodes, parents)
    found.reused = loss_node is not None and loss_node in reaching
    if found.reused:
        found.oldest = min(int(n._sequence_nr()) for n in old_nodes)
    spanning = [(t, n) for t, n in zip(fresh, nodes, strict=True) if n in reaching]
    through = _above((n for _, n in spanning), parents)
    roots = [t for t, n in spanning if n not in through]
    old_scalars = [t for t in old if t.numel() == 1]
    kept = [t for t in roots if t.numel() == 1] + (old_scalars if len(old_scalars) > 1 else [])
    kept += [t for t in roots if t.numel() != 1] + [t for t in old if t.numel() != 1]
    # This scan's own lists refer to the tensors too: the referrer walks skip them (each costs
    # a pass over every gc-tracked object).
    ours = {id(c) for c in (tensors, old, fresh, roots, old_scalars, kept, spanning, *spanning)}
    records = record_holders() if kept or spanning else None
    for t in kept:
        scalar = t.numel() == 1
        seq = sequence_nr(t)
        if seq > marker:  # a newer tensor: the step its graph goes back to
            first = oldest_node(t, limit=5_000, floor=floor)
            seq = seq if first is None else first
        found.oldest = seq if found.oldest is None else min(found.oldest, seq)
        if scalar:
            found.scalars += 1
        else:
            found.tensors += 1
        holders = found.scalar_holders if scalar else found.holders
        named = sum(n for k, n in holders.items() if k != UNKNOWN)
        # Many old tensors are held only from inside a graph (C++); keep looking, within a
        # bound, until a few have a Python holder to name.
        if named < sample and holders.get(UNKNOWN, 0) < 8 * sample:
            name = holder_name(t, ours, records)
            holders[name] = holders.get(name, 0) + 1
    if spanning and not set(found.holders) - {UNKNOWN}:
        # A carried state whose graph saves its earlier values (c = f * c + ..., an RNN cell)
        # keeps them alive from inside that graph (C++): those are the graph, not its holder.
        for t in _frame_tops(spanning, parents):
            name = holder_name(t, ours, records)
            found.holders[name] = found.holders.get(name, 0) + 1
    for holders in (found.holders, found.scalar_holders):
        if len(holders) > 1:
            holders.pop(UNKNOWN, None)
    if found.tensors and set(found.holders) == {UNKNOWN} and _inside_scalars(found, kept, floor):
        # The activations saved in a list of evaluation losses' graphs: that list's finding
        found.in_losses, found.tensors, found.holders = found.tensors, 0, {}
    return found


def _inside_scalars(found: Retained, kept: list[torch.Tensor], floor: int) -> bool:
    """Every kept tensor that is not a scalar lies in the graph of a kept scalar, these being
    held by Python objects and this step's loss not reaching them."""
    if found.reused or set(found.scalar_holders) <= {UNKNOWN}:
        return False
    below = nodes_above([t.grad_fn for t in kept if t.numel() == 1], floor)
    return all(t.grad_fn in below for t in kept if t.numel() != 1)


def nodes_above(roots: list[Any], floor: int, limit: int = 20_000) -> set[Any]:
    """The nodes of the graphs of ``roots`` above ``floor`` (at most ``limit``)."""
    seen, todo = set(roots), list(roots)
    while todo and len(seen) < limit:
        for child, _ in todo.pop().next_functions:
            if child is None or child in seen or type(child).__name__ == "AccumulateGrad":
                continue
            if int(child._sequence_nr()) > floor:
                seen.add(child)
                todo.append(child)
    return seen


def _frame_tops(
    spanning: list[tuple[torch.Tensor, Any]], parents: dict[Any, list[Any]]
) -> list[torch.Tensor]:
    """Of the non-scalar ``(tensor, node)`` pairs, those a script's variable holds (directly or
    in a list or tuple) whose graph runs through no other such tensor."""
    held: set[int] = set()
    for frame in _script_frames():
        for value in frame.f_locals.values():
            if isinstance(value, list | tuple) and len(value) < 100_000:
                held.update(id(v) for v in value)
            elif isinstance(value, nn.Module):
                # A state kept on a model the script holds: a registered buffer (a memory bank
                # updated outside no_grad), a parameter, or a plain tensor attribute.
                for module in value.modules():
                    for store in (module._buffers, module._parameters, vars(module)):
                        held.update(id(v) for v in store.values() if isinstance(v, torch.Tensor))
            held.add(id(value))
    mine = [(t, n) for t, n in spanning if id(t) in held and t.numel() != 1]
    above = _above((n for _, n in mine), parents)
    return [t for t, n in mine if n not in above]


def findings(
    found: Retained,
    step: int,
    step_of: Callable[[int], tuple[int, int]],
    where: Callable[[str], str],
) -> list[Finding]:
    """Findings from one scan at ``step``.

    ``step_of`` maps a sequence number to the steps it may come from (first, last: the
    monitor notes the sequence number on sampled steps only); ``where`` adds the assignment site to a
    holder name. Retained non-scalar graphs are an error when this step's backward runs
    through them (``found.reused``: each step does more work), a warning otherwise.
    """
    out: list[Finding] = []
    # A running total or a list of losses has a Python holder; a scalar reachable only from
    # inside another retained graph (C++) is part of that graph, reported as graph-retained.
    if found.scalars and set(found.scalar_holders) != {UNKNOWN}:
        holder = next(iter(found.scalar_holders), "unknown holder")
        first, oldest = step_of(found.oldest or 0)
        out.append(
            Finding(
                "loss-accumulated-with-graph",
                "error",
                f"{found.scalars} scalar tensor(s) keep the graphs of earlier steps (held by {holder}), from {_steps(first, oldest)} on"
                + (
                    f", which keep {found.in_losses} more tensors of those graphs alive"
                    if found.in_losses
                    else ""
                ),
                where=where(holder),
                evidence={
                    "scalars": found.scalars,
                    "tensors_in_their_graphs": found.in_losses,
                    "holders": found.scalar_holders,
                    "oldest_step": oldest,
                },
            )
        )
    reused = found.reused
    if found.tensors or reused:
        holder = (
            max(found.holders, key=lambda k: found.holders[k])
            if found.holders
            else "unknown holder"
        )
        first, oldest = step_of(found.oldest or 0)
        steps = _steps(first, oldest)
        msg = (
            f"{found.tensors} tensors still hold autograd graphs from {steps} at step {step} (held by {holder})"
            if found.tensors
            else f"this step's loss reaches autograd graphs from {steps} at step {step} (held by {holder})"
        )
        if reused:
            msg += "; this step's backward runs through them, so each step does more work"
        out.append(
            Finding(
                "graph-retained",
                "error" if reused else "warning",
                msg,
                where=where(holder),
                evidence={
                    "tensors": found.tensors,
                    "holders": found.holders,
                    "oldest_step": oldest,
                    "step": step,
                    "backward_reaches_old_graphs": reused,
                },
            )
        )
    return out


def _steps(first: int, last: int) -> str:
    return f"step {last}" if first == last else f"steps {first}-{last}"


def holder_name(
    tensor: torch.Tensor, ignore: Collection[int], records: Mapping[int, str] | None = None
) -> str:
    """``Class.attr``, ``Class.attr[]``, ``global name`` or ``local name in fn()`` for a tensor
    (``ignore``: the ids of the caller's own containers that refer to it; ``records``:
    ``record_holders()``, for a tensor kept in a record of a script's list, so that the list
    that keeps it is named, not a batch sampled from it)."""
    local = _frame_holder(tensor)
    if local:
        return local
    if records is not None and id(tensor) in records:
        return records[id(tensor)]
    for ref in gc.get_referrers(tensor):
        if id(ref) in ignore or isinstance(ref, types.FrameType):
            continue
        name = _describe(ref, tensor, ignore)
        if name:
            return name
    return UNKNOWN


def _script_frames() -> Iterator[types.FrameType]:
    """The live frames outside this package, innermost first."""
    frame: types.FrameType | None = sys._getframe()
    while frame is not None:
        if not frame.f_code.co_filename.startswith(_HERE):
            yield frame
        frame = frame.f_back


def _frame_holder(tensor: torch.Tensor) -> str:
    for frame in _script_frames():
        for name, value in frame.f_locals.items():
            if value is tensor:
                return f"local variable {name!r} in {frame.f_code.co_name}()"
            if (
                isinstance(value, list | tuple)
                and len(value) < 100_000
                and any(v is tensor for v in value)
            ):
                kind = "tuple" if isinstance(value, tuple) else "list"  # (an LSTM's (h, c))
                return f"{kind} {name!r} in {frame.f_code.co_name}()"
            if isinstance(value, dict) and len(value) < 100_000:
                key = next((k for k, v in value.items() if v is tensor), None)
                if key is not None:  # an EMA table kept by hand: ema[name] = 0.99 * ema[name] + ...
                    return f"dict {name!r}[{key!r}] in {frame.f_code.co_name}()"
    return ""


def record_holders() -> dict[int, str]:
    """The tensors kept as fields of short records (tuples or lists of at most
    ``RECORD_FIELDS``) in a script's list, by id, each with that list's name: a replay
    buffer's transitions ``(state, action, reward, q_values)``, a log of ``(step, loss)``.
    One pass over the script's lists, made once per scan that has holders to name."""
    found: dict[int, str] = {}
    for frame in _script_frames():
        for name, value in frame.f_locals.items():
            if not isinstance(value, list | tuple) or len(value) >= 100_000:
                continue
            holder = f"list {name!r} in {frame.f_code.co_name}()"
            for record in value:
                if isinstance(record, tuple | list) and len(record) <= RECORD_FIELDS:
                    for v in record:
                        if isinstance(v, torch.Tensor):
                            found.setdefault(id(v), holder)
    return found


def _attr_of(owner: Any, value: Any) -> str | None:
    attrs = getattr(owner, "__dict__", None)
    if isinstance(attrs, dict):
        for key, v in attrs.items():
            if v is value:
                return key
    for key in getattr(type(owner), "__slots__", ()):
        if getattr(owner, key, None) is value:
            return key
    return None


def _module_holding(slots: dict, ignore: Collection[int]) -> nn.Module | None:
    """The module whose ``_parameters`` or ``_buffers`` dict ``slots`` is, if any."""
    for owner in gc.get_referrers(slots):
        if id(owner) in ignore:
            continue
        if isinstance(owner, nn.Module):
            modules = [owner]
        elif isinstance(owner, dict):  # the module's own __dict__, where it has one
            modules = [
                m
                for m in gc.get_referrers(owner)
                if isinstance(m, nn.Module) and getattr(m, "__dict__", None) is owner
            ]
        else:
            continue
        for module in modules:
            attrs = module.__dict__
            if attrs.get("_buffers") is slots or attrs.get("_parameters") is slots:
                return module
    return None


def _describe(ref: Any, tensor: Any, ignore: Collection[int], depth: int = 0) -> str:
    if depth > 2:
        return ""
    if isinstance(ref, dict):
        for owner in gc.get_referrers(ref):
            if id(owner) in ignore:
                continue
            # A module's __dict__ is its globals: a global, not a ``module.name`` attribute.
            if getattr(owner, "__dict__", None) is ref and not isinstance(owner, types.ModuleType):
                return f"{type(owner).__name__}.{_attr_of(owner, tensor)}"
            if isinstance(owner, types.ModuleType) or (
                isinstance(owner, types.FunctionType) and owner.__globals__ is ref
            ):
                key = next((k for k, v in ref.items() if v is tensor), "?")
                return f"global {key!r}"
        key = next((k for k, v in ref.items() if v is tensor), None)
        if key is not None and "__name__" in ref:
            return f"global {key!r} in {ref['__name__']}"
        if key is not None:
            # A module's registered buffer or parameter (a memory bank, an EMA copy's weights)
            # lives in its ``_buffers`` / ``_parameters`` dict, not in its ``__dict__``.
            module = _module_holding(ref, ignore)
            if module is not None:
                named = sites.script_names([tensor]).get(id(tensor))  # ema.module.0.weight
                return f"{type(module).__name__}.{key}" + (f" ({named})" if named else "")
        return ""
    if isinstance(ref, list | tuple):
        for owner in gc.get_referrers(ref):
            if id(owner) in ignore or isinstance(owner, types.FrameType):
                continue
            inner = _describe(owner, ref, ignore, depth + 1)
            if inner:
                return inner + "[]"
        return ""
    if isinstance(ref, nn.Module | object) and not isinstance(ref, type):
        attr = _attr_of(ref, tensor)
        if attr:
            return f"{type(ref).__name__}.{attr}"
    return ""
