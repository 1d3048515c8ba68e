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
others) is looked for through the nodes ``_passed`` passes (views, selections of rows,
clamps, ``masked_fill``, constants added or multiplied, a temperature: ``.clamp(1e-7, 1 - 1e-7)``,
``+ 1e-8``, ``/ T``; at most ``HOPS``), and below it, through the same, a second squash
(``INNER``). A softmax's output given to ``cross_entropy``
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
INNER = {**SQUASHES, "HardsigmoidBackward0": "hardsigmoid"}
"""Squashes found below the loss's: into [0, 1]; under a sigmoid a tanh too (``(tanh + 1) / 2``
into (0, 1), or a tanh's [-1, 1] itself: a sigmoid of either lies in (0.27, 0.73))."""
PASSED = (
    "ClampBackward1",
    "ClampMinBackward0",
    "ClampMaxBackward0",
    "RsubBackward1",
    "MaskedFillBackward0",
)
"""Nodes whose output is their input's values bounded, complemented (``1 - p``) or filled."""
ONE_SIDED = ("AddBackward0", "SubBackward0", "WhereBackward0")
"""Passed where one side has no gradient: ``p + eps``, ``torch.where(known, p, 0)``."""
SCALED = ("MulBackward0", "DivBackward0")
"""Passed where the other side is a constant or one number: ``p / T``."""


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
    inners = {**INNER, "TanhBackward0": "tanh"} if name == "SigmoidBackward0" else INNER
    if inner is None or type(inner).__name__ not in inners:
        return None
    made = taken + {**SQUASHES, **LOG_SQUASHES}[name]
    return output_squashed_twice(fname, made, inners[type(inner).__name__])


def _below(node: Any) -> Any:
    """The first node at or below ``node`` that ``_passed`` does not pass (at most ``HOPS``
    passed), or None."""
    for _ in range(HOPS + 1):
        if node is None:
            return None
        after = _passed(node)
        if after is None:
            return node
        node = after
    return None


def _passed(node: Any) -> Any:
    """The node whose values ``node`` passes on, bounded, complemented, selected or scaled, or
    None where it is no such node: a view, a selection of rows, a clamp, ``1 - p``, a
    ``masked_fill``, a ``torch.where`` or a sum with one side that has no gradient (a constant),
    a product or quotient by a constant or by one number (a temperature, learnt or not)."""
    name, inputs = type(node).__name__, node.next_functions
    if not inputs:
        return None
    if loss_inputs.VIEWS.fullmatch(name) or name in PASSED or loss_inputs.selects(node, False):
        return inputs[0][0]
    if name in ONE_SIDED and len(inputs) == 2:
        sides = [n for n, _ in inputs if n is not None]
        return sides[0] if len(sides) == 1 else None
    if name in SCALED and len(inputs) == 2:
        if inputs[1][0] is None or _one_number(node, "_saved_other"):
            return inputs[0][0]
        if name == "MulBackward0" and _one_number(node, "_saved_self"):
            return inputs[1][0]
    return None


def _one_number(node: Any, saved: str) -> bool:
    try:
        value = getattr(node, saved)
    except (AttributeError, RuntimeError):  # not saved, or freed
        return False
    return isinstance(value, torch.Tensor) and value.numel() == 1


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
