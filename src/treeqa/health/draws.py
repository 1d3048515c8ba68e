"""``sample-not-reparameterised``: a draw from a distribution whose parameters the model
computes, taken with ``sample()`` where ``rsample()`` was meant, and fed on to the model.

``Normal(mu, std).sample()`` runs under ``torch.no_grad()``: the draw carries no graph, so
whatever the loss computes from it sends nothing back to ``mu`` and ``std``. A VAE that decodes
``z = q.sample()`` trains its decoder on noise its encoder never learns to shape: the encoder
learns from the KL term alone, its posterior collapses to the prior, and the reconstructions
are those of the prior's average. ``rsample()`` draws ``mu + std * eps``, with gradients.

On sampled steps, the ``sample`` of a distribution that has an ``rsample`` (the classes of
``torch.distributions`` that define their own ``sample``, and the base class's) is wrapped: a
draw taken with gradients on, from a distribution holding a tensor that requires gradients (in
its own fields, a base distribution's or a transform's), is kept until the step's end. It is
fed on where a forward of a watched model's module is given it (or a view of it: the same
memory; or what ``torch.cat`` or ``torch.stack``, wrapped while a draw waits, made of it; among
its arguments or keyword arguments, or in a tuple, list or dict there), and a backward then
reaches what that returned (a tensor hook: not a draw decoded for the log), or where a loss
scores it as its input. A ``log_prob`` of it (the distributions' ``log_prob`` is wrapped for
the run) is a score-function gradient (REINFORCE: an action sampled, then scored), and the
draw is let go; a ``log_prob`` with gradients on of any distribution holding tensors that
require them ends the check for the run: it learns through log-probabilities, of draws kept,
cloned or stacked before they are scored. At the step's end, a draw fed on whose
distribution's tensors reach a parameter the clock's optimiser trains (their graph walked
``NODES`` nodes at most: a frozen teacher's latents train nothing of the teacher) makes the
step count; ``STEPS`` sampled steps in a row make the finding, at the ``sample()`` line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import distributions
from torch.distributions.transforms import Transform

from treeqa.health import graphs
from treeqa.health.findings import Finding
from treeqa.health.sites import user_site
from treeqa.health.wrap import Wrappers, note_function_calls, note_function_results

STEPS = 3
"""Sampled steps in a row on which such a draw fed the model."""
DRAWS = 16
"""Draws kept a sampled step."""
NODES = 2_000
"""Autograd nodes walked back from a distribution's tensors to the parameters they are made
from."""
JOINS = ("cat", "stack")
"""The torch functions read, while a draw waits, for one that puts it beside other tensors."""
DEPTH = 3
"""Distributions and transforms inside one another read for tensors (a relaxed one-hot
categorical holds its logits two down)."""


@dataclass
class Draw:
    value: torch.Tensor  # kept, so no other tensor takes its memory before the step ends
    tensors: list[torch.Tensor]  # the distribution's that require gradients
    kind: str  # the distribution's class
    where: str
    fed: str = ""  # what it was given to
    joined: list[torch.Tensor] = field(default_factory=list)  # what torch.cat made of it, kept
    # whether a backward reached what that returned (a loss: no graph, not asked)
    reached: list[bool] = field(default_factory=lambda: [True])


class Draws:
    """``add``: where the finding goes; ``active()``: a sampled step is on; ``trained()``: the
    clock's trained parameters."""

    def __init__(
        self,
        add: Callable[[Finding], None],
        active: Callable[[], bool],
        trained: Callable[[], list[torch.nn.Parameter]],
    ) -> None:
        self.add, self.active, self.trained = add, active, trained
        self.pending: dict[int, Draw] = {}  # by the draw's memory
        self.steps: list[int] = []
        self.first: tuple[str, str, str] | None = None  # the first counted: kind, where, fed
        self.done = False  # said, or the run scores draws by their log-probabilities
        self.wrappers = Wrappers()
        self.joins = Wrappers()  # torch.cat and torch.stack, wrapped while a draw is pending

    def install(self) -> None:
        for cls in _classes():
            if "sample" in vars(cls):
                self.wrappers.add(note_function_results(cls, "sample", self._drawn))
            if "log_prob" in vars(cls):
                self.wrappers.add(note_function_calls(cls, "log_prob", self._scored))

    def uninstall(self) -> None:
        self.wrappers.undo()
        self.joins.undo()

    def _drawn(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], value: Any) -> None:
        """``dist.sample()`` returned ``value`` (``dist``: ``args[0]``)."""
        if not self.active() or self.done or len(self.pending) >= DRAWS:
            return
        dist = args[0]
        if (
            not isinstance(value, torch.Tensor)
            or not value.is_floating_point()
            or not value.numel()
        ):
            return
        if not torch.is_grad_enabled() or not getattr(dist, "has_rsample", False):
            return
        graded = list(_graded(dist, DEPTH))
        if graded:
            self.pending[_memory(value)] = Draw(value, graded, type(dist).__name__, user_site())
            if not self.joins:  # (until the step's end: a conditional VAE's cat([z, y]))
                for name in JOINS:
                    self.joins.add(note_function_results(torch, name, self._joined))

    def _joined(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], made: Any) -> None:
        """``torch.cat(tensors)`` (or ``stack``) returned ``made``: a draw among them is in it."""
        parts = args[0] if args else kwargs.get("tensors", ())
        if not self.pending or not isinstance(made, torch.Tensor):
            return
        for part in parts if isinstance(parts, list | tuple) else ():
            draw = self.pending.get(_memory(part)) if isinstance(part, torch.Tensor) else None
            if draw is not None:
                draw.joined.append(made)
                self.pending.setdefault(_memory(made), draw)
                return

    def _scored(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``dist.log_prob(value)`` (``args``: the two): a draw scored is a score-function
        gradient's; and a run that scores draws with gradients at all learns through
        log-probabilities (REINFORCE over draws kept, stacked, then scored), whose draws take
        no gradient on purpose."""
        dist, value = args[0], args[1] if len(args) > 1 else kwargs.get("value")
        scored = None
        if self.pending and isinstance(value, torch.Tensor):
            scored = self.pending.get(_memory(value))
        if scored is not None:  # (and what torch.cat made of it)
            self.pending = {k: d for k, d in self.pending.items() if d is not scored}
        if (
            not self.done
            and torch.is_grad_enabled()
            and next(_graded(dist, DEPTH), None) is not None
        ):
            self.done, self.pending = True, {}
            self.joins.undo()

    def fed(self, values: Any, to: str, output: Any = None) -> None:
        """``values`` (tensors, or a tuple, list or dict of them) are given ``to`` a module's
        forward, which returned ``output``, or to a loss as its input, on a sampled step."""
        if not self.pending:
            return
        for value in tensors_in(values):
            draw = self.pending.get(_memory(value))
            if draw is None or draw.fed:
                continue
            draw.fed = to
            if output is not None:  # counted if a backward reaches it: not a draw decoded
                # for the log
                made = next((t for t in tensors_in(output) if t.requires_grad), None)
                draw.reached = [False]
                if made is not None:
                    made.register_hook(functools.partial(_reached, draw.reached))

    def judge(self, step: int) -> None:
        """The sampled step ``step`` ends: one without such a draw starts the count again (a
        prior's samples decoded for the log every few hundred steps are not training)."""
        pending, self.pending = self.pending, {}
        self.joins.undo()
        if self.done:
            return
        trained = {id(p) for p in self.trained()} if pending else set()
        draw = next(
            (
                d
                for d in pending.values()
                if d.fed and d.reached[0] and _reaches(d.tensors, trained)
            ),
            None,
        )
        if draw is None:
            self.steps, self.first = [], None
            return
        self.first = self.first or (draw.kind, draw.where, draw.fed)  # (no tensor kept)
        self.steps.append(step)
        if len(self.steps) == STEPS:
            self.done = True
            self.add(_finding(self.first, self.steps))


def _classes() -> Iterator[type]:
    """The distributions of ``torch.distributions`` that may draw with gradients (an
    ``rsample``), and the base class."""
    yield distributions.Distribution
    for name in distributions.__all__:
        cls = getattr(distributions, name)
        if (
            isinstance(cls, type)
            and issubclass(cls, distributions.Distribution)
            and cls is not distributions.Distribution
            and cls.has_rsample is not False  # (a property on some: their base's)
        ):
            yield cls


def _reached(fired: list[bool], grad: torch.Tensor) -> None:
    """A tensor hook: a backward reached what a forward given the draw returned."""
    fired[0] = True


def _graded(obj: Any, depth: int) -> Iterator[torch.Tensor]:
    """The tensors requiring gradients in a distribution's fields, its base distribution's and
    its transforms' (``depth`` levels down)."""
    for value in vars(obj).values():
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                yield value
        elif depth > 1 and isinstance(value, distributions.Distribution | Transform):
            yield from _graded(value, depth - 1)
        elif depth > 1 and isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, distributions.Distribution | Transform):
                    yield from _graded(item, depth - 1)


def _reaches(tensors: list[torch.Tensor], trained: set[int]) -> bool:
    """Whether ``tensors`` are, or are made from, parameters in ``trained``."""
    for t in tensors:
        if id(t) in trained:
            return True
        for node in graphs.walk(graphs.grad_fn(t), NODES):
            variable = getattr(node, "variable", None)  # an AccumulateGrad's parameter
            if variable is not None and id(variable) in trained:
                return True
    return False


def tensors_in(values: Any, depth: int = 2) -> Iterator[torch.Tensor]:
    """The tensors in ``values``, and in the tuples, lists and dicts in it (``depth`` down: a
    forward's arguments, one of them a dict)."""
    if isinstance(values, torch.Tensor):
        yield values
    elif depth and isinstance(values, list | tuple | dict):
        for value in values.values() if isinstance(values, dict) else values:
            yield from tensors_in(value, depth - 1)


def _memory(t: torch.Tensor) -> int:
    """Where ``t``'s storage is: a view of it (``z.view(B, C, 1, 1)``) shares it."""
    return int(t.untyped_storage().data_ptr())


def _finding(first: tuple[str, str, str], steps: list[int]) -> Finding:
    kind, where, fed = first
    return Finding(
        "sample-not-reparameterised",
        "error",
        f"{kind}.sample() draws without gradients (it runs under torch.no_grad), and its "
        f"draw is given to {fed} on sampled steps {steps}, while the distribution's "
        "parameters are made by weights the optimiser trains: nothing the loss computes from "
        "the draw reaches them, so they learn from the other terms alone (a VAE's encoder "
        "from the KL term: its posterior collapses to the prior, and the decoder learns to "
        "reconstruct from noise)",
        where=where,
        evidence={"distribution": kind, "given_to": fed, "steps": steps},
    )
