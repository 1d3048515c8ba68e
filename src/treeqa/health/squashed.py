"""``output-squashed-twice``: a loss given a sigmoid or softmax of what was already one.

A model that ends in ``nn.Sigmoid()`` (or ``nn.Softmax``) already gives probabilities; a loop
that takes ``torch.sigmoid`` of its output again before ``BCELoss``, or ``log_softmax`` of its
softmax before ``nll_loss``, squashes twice. A sigmoid of a probability lies in (0.5, 0.73): the
model can never say "no", and the loss's gradient is a fraction of the one it should be. A
softmax of probabilities keeps every class within a factor e of the others: the loss stays near
log(C) whatever the model learns. Nothing fails; training crawls or stalls, and thresholds and
confidences read off the outputs are wrong.

Read on sampled steps from the loss's input and its autograd graph, no host sync
(``losses.py`` calls ``squashed_twice`` for ``binary_cross_entropy``, ``nll_loss``, ``kl_div``
and ``cross_entropy``): the squash the loss is given (a sigmoid or softmax for
``binary_cross_entropy``; a ``log_softmax``, or the ``log`` of a softmax or sigmoid, for the
others) is looked for through view-like nodes, selections of rows, clamps and constants added
or multiplied (``.clamp(1e-7, 1 - 1e-7)``, ``+ 1e-8``, ``/ T``; at most ``HOPS``), and below it,
through the same, a second sigmoid or softmax. A softmax's output given to ``cross_entropy``
itself is ``probabilities-into-cross-entropy``'s, not this.
"""

from __future__ import annotations

from typing import Any

import torch

from treeqa.health import loss_inputs
from treeqa.health.findings import Finding

HOPS = 6
"""Nodes passed on the way from one squash to the next (views, selections, clamps, constants)."""
SQUASHES = {"SigmoidBackward0": "sigmoid", "SoftmaxBackward0": "softmax"}
LOG_SQUASHES = {"LogSoftmaxBackward0": "log_softmax", "LogSigmoidBackward0": "logsigmoid"}
PASSED = ("ClampBackward1", "ClampMinBackward0", "ClampMaxBackward0", "RsubBackward1")
"""Nodes whose output is their input's values bounded or complemented (``1 - p``)."""
BY_CONSTANT = ("AddBackward0", "SubBackward0", "MulBackward0", "DivBackward0")
"""Nodes passed where their second input is a constant (no node): ``p + eps``, ``p / T``."""


def squashed_twice(fname: str, input: torch.Tensor) -> Finding | None:
    """The finding where the input of ``F.<fname>`` is squashed twice, else None."""
    outer = _below(input.grad_fn)
    if outer is None:
        return None
    name = type(outer).__name__
    if name == "LogBackward0":  # log(softmax(...)): the log-probabilities by hand
        inner_outer = _below(outer.next_functions[0][0] if outer.next_functions else None)
        if inner_outer is None or type(inner_outer).__name__ not in SQUASHES:
            return None
        outer, name, taken = inner_outer, type(inner_outer).__name__, "log of a "
    else:
        taken = ""
    if fname == "binary_cross_entropy":
        if name not in SQUASHES:
            return None
    elif fname in ("nll_loss", "kl_div", "cross_entropy"):
        if name not in LOG_SQUASHES and not taken:
            return None
    else:
        return None
    inner = _below(outer.next_functions[0][0] if outer.next_functions else None)
    if inner is None or type(inner).__name__ not in SQUASHES:
        return None
    made = taken + {**SQUASHES, **LOG_SQUASHES}[name]
    return output_squashed_twice(fname, made, SQUASHES[type(inner).__name__])


def _below(node: Any) -> Any:
    """The first node at or below ``node`` that is not a view, a selection of rows, a clamp or
    a constant added or multiplied (at most ``HOPS`` passed), or None."""
    for _ in range(HOPS + 1):
        if node is None:
            return None
        name = type(node).__name__
        passed = (
            loss_inputs.VIEWS.fullmatch(name)
            or name in PASSED
            or (name in BY_CONSTANT and len(node.next_functions) == 2 and _constant(node))
            or loss_inputs.selects(node, rows=False)
        )
        if not passed or not node.next_functions:
            return node
        node = node.next_functions[0][0]
    return None


def _constant(node: Any) -> bool:
    """The node's second input is no tensor with a gradient (a number, a constant tensor)."""
    return node.next_functions[1][0] is None


def output_squashed_twice(fname: str, outer: str, inner: str) -> Finding:
    """``F.<fname>``'s input is ``outer`` of what ``inner`` already made."""
    if outer.endswith("sigmoid"):
        effect = (
            "a sigmoid of probabilities lies in (0.5, 0.73): every prediction reads as the "
            "positive class, and the loss's gradient is a fraction of what it should be"
        )
    else:
        effect = (
            "probabilities squashed again keep every class within a factor e of the others: "
            "the loss stays near its level at chance and its gradient shrinks, whatever the "
            "model learns"
        )
    return Finding(
        "output-squashed-twice",
        "error",
        f"{fname}'s input is a {outer} of a {inner}'s output: the model's output, already "
        f"probabilities, was squashed again before the loss; {effect}",
        evidence={"function": fname, "outer": outer, "inner": inner},
    )
