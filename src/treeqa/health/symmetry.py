"""``units-identical``: a layer whose units are copies of one another, trained so.

Weights initialised to one value (``nn.init.zeros_``/``constant_``/``ones_`` applied to every
layer, ``weight.data.fill_(0.01)``, an ``nn.Parameter(torch.zeros(...))`` written by hand)
give every unit of a hidden layer the same output; where the layers after it are alike too,
each unit gets the same gradient, and they stay copies for the whole run: the layer works as
one unit, however wide (symmetry never broken). A layer whose next layer is random is not
this: its units get different gradients and part at the first step.

After the clock's step, on its sampled steps from its ``FROM``-th step on, each parameter of
two dims or more that the optimiser holds and that has a gradient is read for its rows along
dim 0 (a layer's output units, a convolution's filters), all rows at once or within each of
3 or 4 equal blocks (an LSTM's gates, a GRU's, the queries, keys and values of a fused
projection): equal within ``TOLERANCE`` of the weight's largest value, with a gradient not
zero. Three rows of each block first (one host read for all parameters), every row of those
that pass. Such a parameter found so again at the next sampled step, every row moved by the
same since (trained in step), makes the finding; so do ``DEAD`` weights or more all 0 with a
gradient of 0 at both readings, where no weight has a gradient (initialised to 0 below ReLU
or tanh, every layer outputs 0 and passes no gradient on). A new clock is read afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from treeqa.health import checks
from treeqa.health.findings import Finding
from treeqa.health.processes import local_part

FROM = 10
"""The clock's step (from its first) from which parameters are read: by then a zero-initialised
output layer, whose rows get different gradients, has parted them."""
TOLERANCE = 1e-3
"""Rows within this share of the weight's largest absolute value of one another are equal."""
BLOCKS = (1, 3, 4)
"""Ways to cut dim 0 into equal blocks read on their own: the whole; a GRU's or a fused
projection's three (queries, keys, values); an LSTM's four gates."""
STEP_TOLERANCE = 1e-2
"""Rows whose moves since the last reading are within this share of the largest move of one
another moved in step (the bug's, by Adam: within ~1e-6)."""
READINGS = 2
"""Sampled steps read: a layer's units are copies from the start or not at all."""
DEAD = 2
"""Weights all 0, with a gradient all 0, at two readings, for the finding: every layer
initialised to 0 with its biases, below ReLU or tanh (0 at 0), passes no gradient to any."""


class IdenticalUnits:
    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.readings = 0
        # parameter id -> (blocks, a copy of its rows) at the last reading
        self.candidates: dict[int, tuple[int, torch.Tensor]] = {}
        self.dead: set[int] = set()  # ids of those all 0 with a gradient of 0, at the last reading

    def note(
        self,
        steps: int,
        optimizer: torch.optim.Optimizer,
        params: Sequence[tuple[str, nn.Parameter]],
    ) -> None:
        """A sampled step of the clock, the ``steps``-th of its run, after its update;
        ``params``: the trained models' named parameters (for names)."""
        if steps < FROM or self.readings >= READINGS:
            return
        self.readings += 1
        held = [
            p
            for group in optimizer.param_groups
            for p in group["params"]
            if isinstance(p, torch.Tensor)
            and p.dim() >= 2
            and p.shape[0] >= 2
            and p.grad is not None
            and p.grad.layout == p.layout == torch.strided  # (a sparse gradient: an Embedding's)
            and p.is_floating_point()
            and not p.is_meta
        ]
        found, dead, flowing = _identical(held)
        named = {id(p): name for name, p in params}
        again = [(p, blocks) for p, blocks in found if _in_step(p, blocks, self.candidates)]
        # every weight of the stack all 0 and no gradient through any (a zero layer beside
        # trained ones, an auxiliary head weighted 0 for a warm-up, is not)
        still = [p for p in dead if id(p) in self.dead] if not flowing else []
        self.candidates = {id(p): (blocks, _rows(p).clone()) for p, blocks in found}
        self.dead = {id(p) for p in dead}
        still = still if len(still) >= DEAD else []
        if again or still:
            self.readings = READINGS
            self.add(_finding(again, still, named, steps))


def _in_step(p: torch.Tensor, blocks: int, before: dict[int, tuple[int, torch.Tensor]]) -> bool:
    """``p``'s rows, equal now, were so at the last reading too, and every row has moved by
    the same since (within ``STEP_TOLERANCE`` of the move): the units train in step. (Rows a
    small learning rate barely moves from one value, each by its own gradient, stay within
    ``TOLERANCE`` of one another for a while: a warm-up's, per-channel scales' [C, 1, 1].)"""
    if id(p) not in before or before[id(p)][0] != blocks:
        return False
    moved = _rows(p) - before[id(p)][1]
    top = float(moved.abs().amax())
    return top > 0 and float(_spread(moved, blocks, whole=True)) <= STEP_TOLERANCE * top


def _rows(p: torch.Tensor) -> torch.Tensor:
    """``p``'s rows [dim 0, rest] (this process's shard's, for a sharded parameter)."""
    w = local_part(p.detach())
    return w.reshape(w.shape[0], -1)


def _identical(
    params: list[torch.Tensor],
) -> tuple[list[tuple[torch.Tensor, int]], list[torch.Tensor], bool]:
    """The parameters whose rows are equal (all, or within each of a way of ``BLOCKS``), whose
    gradient is not zero: (parameter, blocks); those all 0 whose gradient is all 0; whether
    any has a gradient not zero."""
    rows = {id(p): _rows(p) for p in params}
    params = [p for p in params if rows[id(p)].shape[0] >= 2 and rows[id(p)].shape[1]]
    if not params:
        return [], [], False
    with torch.no_grad():
        # each parameter's largest value and gradient, then its three rows' spread per way
        reads: list[torch.Tensor] = []
        ways: list[list[int]] = []
        for p in params:
            w = rows[id(p)]
            fits = [b for b in BLOCKS if w.shape[0] % b == 0 and w.shape[0] // b >= 2]
            ways.append(fits)
            assert p.grad is not None  # (only those with one are read)
            reads += [w.abs().amax(), local_part(p.grad.detach()).abs().amax()]
            reads += [_spread(w, b, whole=False) for b in fits]
        values = checks.read_together(reads)
    passed: list[tuple[torch.Tensor, int]] = []
    dead: list[torch.Tensor] = []
    flowing = False
    at = 0
    for p, fits in zip(params, ways, strict=True):
        top, grad, spreads = values[at], values[at + 1], values[at + 2 : at + 2 + len(fits)]
        at += 2 + len(fits)
        flowing = flowing or grad > 0
        if top == 0 and grad == 0:
            dead.append(p)
        if top > 0 and grad > 0:
            passed += [(p, b) for b, s in zip(fits, spreads, strict=True) if s <= TOLERANCE * top]
    # every row of those that passed on three; the fewest blocks that hold
    kept: dict[int, tuple[torch.Tensor, int]] = {}
    for p, b in passed:
        if id(p) in kept:
            continue
        w = rows[id(p)]
        if float(_spread(w, b, whole=True)) <= TOLERANCE * float(w.abs().amax()):
            kept[id(p)] = (p, b)
    return list(kept.values()), dead, flowing


def _spread(w: torch.Tensor, blocks: int, whole: bool) -> torch.Tensor:
    """The largest difference between a row of each of ``blocks`` equal blocks of ``w``'s rows
    and that block's first row: every row (``whole``), or its second and last."""
    rows = w.reshape(blocks, w.shape[0] // blocks, -1)
    first = rows[:, :1]
    picked = rows if whole else rows[:, [1, -1]]
    return (picked - first).abs().amax()


def _finding(
    found: list[tuple[torch.Tensor, int]],
    dead: list[torch.Tensor],
    named: dict[int, str],
    steps: int,
) -> Finding:
    """``found``: trained weights whose units stayed copies; ``dead``: weights all 0 with a
    gradient all 0 (at step ``steps`` and the reading before)."""
    said = [
        named.get(id(p), f"a {list(p.shape)} parameter")
        + ("" if blocks == 1 else f" (within each of its {blocks} blocks)")
        for p, blocks in found
    ]
    zeros = [named.get(id(p), f"a {list(p.shape)} parameter") for p in dead]
    parts = []
    if found:
        first = found[0][0]
        parts.append(
            f"{len(found)} trained weight tensors have identical units at step {steps} and "
            f"kept them so while training ({sum(int(p.shape[0]) for p, _ in found)} rows in "
            f"all; every row of {said[0]}, shape {list(first.shape)}, equals its first): the "
            "weights were initialised to one value (and so were the layers after them), so "
            "every unit gets the same gradient and the layer works as one unit, however wide: "
            + ", ".join(said[:5])
        )
    if dead:
        parts.append(
            f"{len(dead)} weight tensors are all 0 at step {steps} with a gradient of exactly 0 "
            "(their layers, initialised to 0 with their biases, output 0 through ReLU or tanh, "
            "so no gradient reaches any of them): they never train: " + ", ".join(zeros[:5])
        )
    return Finding(
        "units-identical",
        "warning",
        "; ".join(parts),
        where=(said + zeros)[0],
        evidence={
            "parameters": said[:20],
            "shapes": [list(p.shape) for p, _ in found[:20]],
            "blocks": [b for _, b in found[:20]],
            "all_zero": zeros[:20],
            "step": steps,
        },
    )
