"""``zero-derivative-op``: parameters whose every gradient is exactly zero because their only
way to the loss goes through an op whose derivative is zero everywhere.

``torch.round`` (and floor, ceil, trunc, sign) is a step function: autograd gives it a
derivative of zero, so weights quantised with it for quantisation-aware training, or binarised
with ``sign``, get exactly zero gradients and never train, where a straight-through estimator
(``w + (w.round() - w).detach()``) passes the gradient on. ``torch.normal(mu, std)`` and
``torch.bernoulli(p)`` likewise give their parameters zero gradients (a VAE samples with
``mu + std * torch.randn_like(std)`` instead).

On each sampled step the gradients' norms (which the non-finite check takes anyway, in the
same host sync) tell which parameters got a gradient of exactly zero. Those zero on
``SAMPLED_STEPS`` sampled steps in a row are looked for, once, below such an op in the graph of
the step's loss: the finding names the op and the parameters. A parameter whose gradient is
zero for other reasons (a bias before a batch norm, rounding to zero; a dead ReLU layer) has no
such op above it and is not reported; nor is one with another way to the loss: a policy that
samples with ``bernoulli`` reaches it through the sample's log-probability too, and its zero
is an advantage of zero or a loss weighted 0 for a warm-up.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health.findings import Finding

SAMPLED_STEPS = 3
"""Sampled steps in a row with a parameter's gradient exactly zero before the graph is read."""
NODES = 20_000
"""Nodes of the loss's graph walked looking for the op, and below it for the parameters."""
OPS = {
    "RoundBackward0": "torch.round",
    "RoundBackward1": "torch.round",
    "FloorBackward0": "torch.floor",
    "CeilBackward0": "torch.ceil",
    "TruncBackward0": "torch.trunc",
    "SignBackward0": "torch.sign",
    "SgnBackward0": "torch.sgn",
    "NormalBackward1": "torch.normal",
    "NormalBackward2": "torch.normal",
    "NormalBackward3": "torch.normal",
    "BernoulliBackward0": "torch.bernoulli",
    "BernoulliBackward1": "torch.bernoulli",
    "BernoulliBackward2": "torch.bernoulli",
}
"""Autograd nodes of ops whose derivative is zero everywhere, and the op's name."""


class ZeroGradients:
    """Fed each sampled step's parameters with exactly zero gradients; reports once."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.runs: dict[str, int] = {}  # parameter -> sampled steps in a row its gradient was 0
        self.looked: set[str] = set()  # parameters already looked for below such an op
        self.said = False

    def saw(
        self,
        step: int,
        zero: Sequence[str],
        loss: torch.Tensor | None,
        params: Sequence[tuple[str, nn.Parameter]],
    ) -> None:
        """``zero``: the parameters whose gradient was exactly zero on sampled step ``step``;
        ``loss``: the tensor whose backward gave them (its graph still walkable)."""
        if self.said:
            return
        self.runs = {name: self.runs.get(name, 0) + 1 for name in zero}
        due = {n for n, run in self.runs.items() if run >= SAMPLED_STEPS and n not in self.looked}
        if not due or loss is None or loss.grad_fn is None:
            return
        self.looked.update(due)
        by_id = {id(p): name for name, p in params if name in due}
        found = _below_zero_derivative(loss.grad_fn, by_id)
        if found is None:
            return
        node, names = found
        op = OPS[node]
        self.said = True
        count = sum(p.numel() for n, p in params if n in names)
        self.add(
            Finding(
                "zero-derivative-op",
                "error",
                f"{len(names)} parameter tensor(s) ({count} values) got exactly zero gradients "
                f"on {SAMPLED_STEPS} sampled steps in a row, through {op} ({node} in the graph), "
                f"whose derivative is zero everywhere: {', '.join(sorted(names)[:5])} never "
                "train",
                where=sorted(names)[0],
                step=step,
                evidence={
                    "op": op,
                    "node": node,
                    "parameters": sorted(names)[:20],
                    "values": count,
                },
                fix=FIXES.get(op, FIXES["torch.round"]),
            )
        )


FIXES = {
    "torch.round": "pass the gradient straight through the rounding (a straight-through "
    "estimator): q = x + (torch.round(x) - x).detach(), or use torch.ao.quantization's fake "
    "quantisation, whose backward does",
    "torch.sign": "binarise with a straight-through estimator: b = x + (torch.sign(x) - "
    "x).detach() (or clip the passed gradient to |x| <= 1, as BinaryConnect does)",
    "torch.normal": "sample with the reparameterisation trick, mu + std * "
    "torch.randn_like(std) (Normal(mu, std).rsample()), whose gradient reaches mu and std",
    "torch.bernoulli": "pass the gradient through the sample (a straight-through estimator, "
    "or a relaxed Bernoulli / Gumbel-softmax), or train the probabilities through the "
    "sample's log-probability (REINFORCE)",
}
for _op in ("torch.floor", "torch.ceil", "torch.trunc"):
    FIXES[_op] = FIXES["torch.round"].replace("torch.round", _op)
FIXES["torch.sgn"] = FIXES["torch.sign"].replace("torch.sign", "torch.sgn")


def _below_zero_derivative(root: Any, by_id: dict[int, str]) -> tuple[str, list[str]] | None:
    """The node name of the first op of ``OPS`` in the graph from ``root`` (breadth first,
    ``NODES`` nodes at most) with some of the parameters ``by_id`` (id -> name) below it, and
    those of them that reach the loss through such ops only; None when there are none. A
    parameter with another way to the loss (a policy's, through the log-probability of the
    action it sampled) got its zero some other way (an advantage of zero, a loss weighted 0)."""
    seen: set[int] = set()
    todo = collections.deque([root])
    first, below, free = "", set(), set()
    while todo and len(seen) < NODES:
        node = todo.popleft()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        name = type(node).__name__
        if name in OPS:
            under = _parameters_below(node, by_id)
            first = first or (name if under else "")
            below.update(under)
            continue  # (what reaches the loss only through this op: below)
        variable = getattr(node, "variable", None)  # AccumulateGrad: reached another way
        if variable is not None and id(variable) in by_id:
            free.add(by_id[id(variable)])
        todo.extend(n for n, _ in getattr(node, "next_functions", ()))
    only = sorted(below - free)
    return (first, only) if first and only else None


def _parameters_below(node: Any, by_id: dict[int, str]) -> list[str]:
    """The names of the parameters of ``by_id`` whose gradients flow into ``node``."""
    found: set[str] = set()
    seen: set[int] = set()
    todo = [node]
    while todo and len(seen) < NODES:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)  # AccumulateGrad: a leaf's
        if variable is not None and id(variable) in by_id:
            found.add(by_id[id(variable)])
        todo.extend(n for n, _ in getattr(node, "next_functions", ()))
    return sorted(found)
