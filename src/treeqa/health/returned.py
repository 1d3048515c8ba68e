"""Loss terms a model returns that no backward uses (``returned-loss-unused``).

A mixture of experts returns its load-balancing loss beside its output (``out, aux = moe(x)``),
a VQ layer its commitment loss, a model its KL term: each a 0-dim value with a graph, there to
be added to the loss. Left out (``loss = mse``), nothing fails and the term is printed as it
grows: a probe's router sent every token to 2 of its 8 experts by step 100.

On a sampled step, the output of a model the clock trains, run in train mode with gradients
on, is read for 0-dim floating tensors with a graph (in a tuple, list or dict, and one level
inside those), other than the model's own loss (a dict's ``loss``, a tuple's first item: a
script that computes its own loss in its place chooses to). Only an output of two tensors or
more is read. Each is noted by its place in the output and its graph node's sequence number;
each backward (or ``torch.autograd.grad``) until the next step begins walks its losses'
graphs over the nodes made since the oldest of them (the end of the forward and the loss: a
few nodes) and marks those it reaches. When the next step begins, one that none reached
counts; a place reached on any sampled step is never
reported. A value computed from another of the output's (``exp`` of a loss beside it) is not
read, nor one equal to a backward's loss (the model's loss computed again). When the run ends,
a place unused on 3 sampled steps or more and used on none makes the finding (a term added
after a warm-up is used by then): a warning when its key or the script's name for it says it
is a loss term, information otherwise (a value returned for the log).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from treeqa.health import graphs, sites
from treeqa.health.findings import Finding

UNUSED_STEPS = 3
"""Sampled steps with a returned loss term unused before the finding."""

LOSS_WORDS = ("loss", "aux", "penalty", "kl", "reg", "balanc", "commit")
"""Words in a key or a script's name that make a returned value a loss term."""

OWN_LOSS = ("output['loss']", "output[0]")
"""Places of a model's own loss in its output: a dict's ``loss``, a tuple's first item."""


@dataclass
class Term:
    """A 0-dim value with a graph that a sampled step's forward returned."""

    place: str  # in the output: "output[1]", "output['aux_loss']"
    seq: int  # its graph node's sequence number
    value: float
    tensor: weakref.ref[torch.Tensor]
    where: str  # the script's line that ran the forward
    reached: bool = False


class ReturnedLosses:
    def __init__(self) -> None:
        self.pending: list[Term] = []  # this sampled step's
        self.used: set[str] = set()  # places a backward reached on some sampled step
        self.unused: dict[str, int] = {}  # sampled steps with the place unused
        # by place: the term as it was on its UNUSED_STEPS-th sampled step unused, and the
        # script's name for it then
        self.first: dict[str, tuple[Term, str]] = {}

    def forward_done(self, output: Any) -> None:
        """A model the clock trains returned ``output`` on a sampled step, in train mode with
        gradients on."""
        found = list(_tensors(output))
        if len(found) < 2:
            return
        values = [
            (place, t)
            for place, t in found
            if t.dim() == 0 and t.is_floating_point() and t.grad_fn is not None
        ]
        if not values or all(place in OWN_LOSS for place, _ in values):
            return
        seqs = [int(t.grad_fn._sequence_nr()) for _, t in values]
        where = sites.user_site()
        for (place, t), seq in zip(values, seqs, strict=True):
            if place in OWN_LOSS:
                continue
            others = set(seqs) - {seq}
            if others and _numbers([t.grad_fn], min(seqs)) & others:
                continue  # computed from another returned value (the model's loss)
            self.pending.append(Term(place, seq, float(t.detach()), weakref.ref(t), where))

    def backward(self, losses: Any) -> None:
        """A backward of ``losses`` (a tensor, or several: ``torch.autograd.backward``'s and
        ``torch.autograd.grad``'s outputs) runs: the returned values their graphs reach."""
        waiting = [term for term in self.pending if not term.reached]
        if not waiting:
            return
        given = losses if isinstance(losses, (tuple, list)) else (losses,)
        given = [t for t in given if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen = _numbers([t.grad_fn for t in given], min(term.seq for term in waiting))
        values = {float(t.detach()) for t in given if t.numel() == 1}
        for term in waiting:
            term.reached = term.seq in seen or term.value in values

    def step_ended(self) -> None:
        """The step after a sampled one begins (or the run ends): the sampled step's returned
        values that no backward reached, by its optimiser step or after it (a second
        optimiser's loss over the same forward)."""
        terms, self.pending = self.pending, []
        for term in terms:
            if term.reached:
                self.used.add(term.place)
        for term in terms:
            if term.reached or term.place in self.used:
                continue
            self.unused[term.place] = self.unused.get(term.place, 0) + 1
            if self.unused[term.place] == UNUSED_STEPS:  # named while the script holds it
                tensor = term.tensor()
                names = sites.script_names([tensor]) if tensor is not None else {}
                self.first[term.place] = (term, names.get(id(tensor), ""))

    def finish(self) -> Finding | None:
        """The run ended: a place unused on ``UNUSED_STEPS`` sampled steps, used on none."""
        for place, (term, name) in self.first.items():
            if place not in self.used:
                return _finding(term, name, self.unused[place])
        return None


def _finding(term: Term, name: str, steps: int) -> Finding:
    called = f"{name}, the model's {term.place}" if name else f"the model's {term.place}"
    loss_like = any(w in f"{term.place} {name}".lower() for w in LOSS_WORDS)
    cause = (
        "a loss term (an auxiliary, load-balancing or KL loss) left out of the loss that is "
        "backpropagated, so what it should train does not learn it"
        if loss_like
        else "if it is a loss term, it is left out of the loss; if it is only logged, "
        "computing it under torch.no_grad() (or returning it detached) keeps no graph for it"
    )
    return Finding(
        "returned-loss-unused",
        "warning" if loss_like else "info",
        f"the model returns a 0-dim value with a graph ({called}, {term.value:.4g}) that no "
        f"backward used on {steps} sampled steps: {cause}",
        where=term.where,
        evidence={"output": term.place, "name": name, "value": term.value, "steps": steps},
    )


def _tensors(output: Any, place: str = "output", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """The tensors of a model's output, by place: itself, or in a tuple, list or dict (a
    ``ModelOutput`` too), and one level inside those."""
    if isinstance(output, torch.Tensor):
        yield place, output
    elif depth < 2 and isinstance(output, (tuple, list)):
        for i, item in enumerate(output):
            yield from _tensors(item, f"{place}[{i}]", depth + 1)
    elif depth < 2 and isinstance(output, dict):
        for key, item in output.items():
            yield from _tensors(item, f"{place}[{key!r}]", depth + 1)


def _numbers(roots: list[Any], floor: int) -> set[int]:
    """The sequence numbers of the nodes of ``roots``' graphs numbered ``floor`` or above (a
    node made before ``floor`` reaches none of those: what it uses is older still)."""
    return {int(node._sequence_nr()) for node in graphs.nodes_above(roots, floor - 1)}
