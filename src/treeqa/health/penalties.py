"""A penalty on gradients taken without ``create_graph`` (``penalty-without-graph``).

A gradient penalty (WGAN-GP's ``(||grad D(x_hat)|| - 1)^2``, R1, an input-gradient norm) needs
``torch.autograd.grad(..., create_graph=True)``: the gradients it penalises must be part of the
graph the loss is differentiated through. Without it they come back as plain tensors, the
penalty computed from them has no graph, and added to the loss it adds a constant: the loss
reads as penalised and nothing is (a probe's critic: penalty 0.10 -> 2.98 while its loss
climbed -0.66 -> 25.4).

On a sampled step, a ``torch.autograd.grad`` call without ``create_graph`` (outside a backward)
starts a ``TorchFunctionMode`` that follows what is computed from its results until the step's
next backward (or its end). An addition or subtraction whose result requires gradients and one
of whose operands is a single value computed from those results that requires none (the
penalty, added to a loss that has a graph) is noted, and makes the finding, at its line, when
the step's backward is given a loss made of it (among the first ``WALKED`` nodes of its graph:
a sum only logged is not). A weight updated by hand, ``p -= lr * g`` or ``p - lr * g`` (a bias
of shape [1] among them), is no 0-dim loss plus a 0-dim value, and a subtraction is a target. Gradients used as
data are not it: an adversarial example ``x + eps * grad.sign()`` (a tensor, not one value), a
first-order meta-learning update ``p - lr * g``, a perturbation of the weights (SAM). Not in a
script that compiles (``torch.compile``): Dynamo guards on the mode stack.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.monitor import compiled

ADDS = frozenset(
    {
        torch.Tensor.__add__,
        torch.Tensor.__radd__,
        torch.Tensor.__iadd__,
        torch.Tensor.add,
        torch.Tensor.add_,
        torch.add,
    }
)
"""What puts a penalty into a loss: ``loss + lam * penalty``, ``sum(terms)``, ``loss += ...``.
Not a subtraction: a constant taken from gradients and subtracted is a target (GradNorm's
``|G_i - C_i|``, its target held constant on purpose)."""
WALKED = 64
"""Autograd nodes of a backward's loss looked through for such a sum."""


class _Following(TorchFunctionMode):
    """Every torch function run while it is on, told to ``saw(func, args, kwargs, result)``."""

    def __init__(self, saw: Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]):
        super().__init__()
        self.saw = saw

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        self.saw(func, args, kwargs, result)
        return result


class DetachedPenalties:
    """``report``: where the finding goes (once)."""

    def __init__(self, report: Callable[[Finding], None]):
        self.report = report
        self.mode: _Following | None = None
        self.grad_site = ""  # the autograd.grad call without create_graph
        # what was computed from its results (weak: a step's temporaries die with it)
        self.followed: weakref.WeakValueDictionary[int, torch.Tensor] = (
            weakref.WeakValueDictionary()
        )
        self.found = False
        # additions of such a value to a loss with a graph, until the backward: (their
        # autograd node, the value, the line)
        self.sums: list[tuple[Any, float, str]] = []

    def grad_called(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A sampled step's ``torch.autograd.grad`` is about to run (outside a backward)."""
        create_graph = kwargs.get("create_graph", args[4] if len(args) > 4 else False)
        if create_graph or self.found or self.mode is not None:
            return
        # Not in a script that compiles: Dynamo guards on the function-mode stack, and its
        # backends call torch.autograd.grad while they trace a frame.
        if compiled():
            return
        self.grad_site = sites.user_site(3)
        self.mode = _Following(self._saw)
        self.mode.__enter__()

    def stop(self, loss: torch.Tensor | None = None) -> None:
        """The step's backward of ``loss`` is about to run, or the step ended (None): stop
        following; a sum noted that ``loss`` is made of makes the finding (one only logged,
        never given to a backward, does not)."""
        if self.mode is None:
            return
        stack = _get_current_function_mode_stack()
        if stack and stack[-1] is self.mode:  # (a mode the script entered since stays on)
            self.mode.__exit__(None, None, None)
            self.mode = None
            self.followed.clear()
        sums, self.sums = self.sums, []
        if not sums or loss is None or loss.grad_fn is None or self.found:
            return
        nodes = _nodes(loss.grad_fn)
        for node, value, where in sums:
            if node in nodes:
                self.found = True
                self.report(_finding(value, where, self.grad_site))
                return

    def _saw(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        if getattr(func, "__name__", "") == "grad" and getattr(func, "__module__", "") in (
            "torch.autograd",
            "torch.autograd.__init__",
        ):
            self._follow(result)
            return
        given = [t for t in _tensors((args, kwargs)) if id(t) in self.followed]
        if not given:
            return
        # A loss: one value with a graph (not a weight updated by hand, p -= lr * g, which has
        # none in place, nor a fast weight p - lr * g of a first-order meta-learner, a bias of
        # shape [1] among them), plus a 0-dim value with none.
        if func in ADDS and isinstance(result, torch.Tensor) and result.grad_fn is not None:
            constant = [t for t in given if not t.requires_grad and t.dim() == 0]
            if constant and result.dim() == 0 and not self.found:
                self.sums.append((result.grad_fn, float(constant[0]), sites.user_site(2)))
        self._follow(result)

    def _follow(self, result: Any) -> None:
        for t in _tensors(result):
            self.followed[id(t)] = t


def _tensors(value: Any, depth: int = 2) -> Iterator[torch.Tensor]:
    """The tensors in ``value`` and in the tuples, lists and dicts in it, ``depth`` levels
    down: a function's ``(args, kwargs)``, or its result."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth and isinstance(value, tuple | list | dict):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _tensors(item, depth - 1)


def _nodes(node: Any) -> set[Any]:
    """The first ``WALKED`` autograd nodes below ``node``, breadth first."""
    seen, todo = {node}, [node]
    while todo and len(seen) < WALKED:
        for child, _ in todo.pop(0).next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def _finding(value: float, where: str, grad_site: str) -> Finding:
    return Finding(
        "penalty-without-graph",
        "error",
        f"a term of value {value:.4g} computed from torch.autograd.grad without "
        f"create_graph=True (at {grad_site}) is added to a loss that has a graph: the "
        "gradients it is made of are plain tensors, so the term has no graph of its own and "
        "adds a constant, which trains nothing (a gradient penalty that penalises nothing)",
        where=where,
        evidence={"value": value, "grad_site": grad_site},
    )
