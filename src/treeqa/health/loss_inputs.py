"""What goes into a loss, read from the tensor and its autograd graph: probabilities where
logits belong, logits where log-probabilities belong, a softmax over the wrong dim, shapes that
broadcast into every prediction against every target, CTC targets that hold the blank.

``losses.py`` calls these on the wrapped loss functions' inputs; the doctor walks a
hand-written loss's graph with ``broadcast_difference``, and the loss a backward is given with
``unscaled``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from treeqa.health.findings import Finding


def looks_like_probabilities(x: torch.Tensor, dim: int | None = None) -> bool:
    """Non-negative rows along the class dimension ``dim`` (by default 1, or 0 for one row)
    that sum to 1 (one host sync), to within 1e-3 or the dtype's own step at 1, whichever is
    wider: a bfloat16 softmax rounds each probability to 8 bits, and its rows sum to 1 only
    within ~0.003."""
    if not x.is_floating_point() or x.numel() == 0 or x.dim() == 0:
        return False
    dim = dim if dim is not None else 1 if x.dim() >= 2 else 0
    tolerance = max(1e-3, torch.finfo(x.dtype).eps)
    x = x.detach().float()
    sums = x.sum(dim)
    ok = (x.min() >= 0) & ((sums - 1).abs().max() < tolerance)
    return bool(ok)


def unscaled(loss: torch.Tensor) -> tuple[Any, float]:
    """The autograd node ``loss`` comes from once the steps that divide or multiply it by
    constants are walked back, through any number of them, and the factor they make (1 where
    there are none): accelerate's ``Accelerator.backward`` divides the loss by its accumulation
    steps, the transformers ``Trainer`` by its own before it, and a loop of one's own
    accumulating over k micro-batches by k (or multiplies it by 1/k). A constant is a
    one-element CPU tensor without gradients (a Python number is one), finite and above 0; any
    other is not read, so this makes no host sync. DDP hands a loss its model computed on
    unchanged, through its ``_DDPSink`` (with ``find_unused_parameters``, as the ``Trainer``
    sets it): walked through. Read before the backward (after it the factor is freed)."""
    return unscaled_node(loss.grad_fn, loss.output_nr)


def unscaled_node(node: Any, nr: int = 0) -> tuple[Any, float]:
    """``unscaled`` from an autograd node (output ``nr`` of it) rather than a tensor."""
    scale = 1.0
    while node is not None:
        name = type(node).__name__
        if name == "_DDPSinkBackward":  # its outputs are its inputs, one for one
            node, nr = node.next_functions[nr]
            continue
        if name not in ("DivBackward0", "MulBackward0"):
            break
        try:
            factor = node._saved_other
        except RuntimeError:  # freed by an earlier backward: torch raises on this one
            break
        # None where only the other side needs it (a constant tensor times the loss).
        if not isinstance(factor, torch.Tensor) or factor.numel() != 1:
            break
        if factor.device.type != "cpu" or factor.requires_grad or factor.is_complex():
            break
        value = factor.item()
        if not (math.isfinite(value) and value > 0):
            break
        scale = scale / value if name == "DivBackward0" else scale * value
        node, nr = node.next_functions[0]
    return node, scale


def summed_terms(node: Any, most: int = 8) -> list[tuple[Any, float]] | None:
    """The terms an autograd node adds up (``AddBackward0`` with no alpha, any depth) as
    (their node, the constant factor each is taken times: ``unscaled_node``), a node that adds
    nothing its own only term; None past ``most`` terms. CLIP's symmetric loss
    ``(F.cross_entropy(logits, i) + F.cross_entropy(logits.T, i)) / 2`` is two terms of 1."""
    terms: list[tuple[Any, float]] = []
    todo: list[tuple[Any, int, float]] = [(node, 0, 1.0)]
    while todo:
        node, nr, k = todo.pop()
        node, scale = unscaled_node(node, nr)
        k *= scale
        if type(node).__name__ == "AddBackward0" and getattr(node, "_saved_alpha", 1) == 1:
            todo += [(child, i, k) for child, i in node.next_functions if child is not None]
        else:
            terms.append((node, k))
        if len(terms) + len(todo) > most:
            return None
    return terms


def zeroed_terms(node: Any) -> int:
    """How many of the terms ``node`` adds up (``summed_terms``, and inside a mean or sum
    among them: ``(recon + beta * kl).mean()`` over per-example terms) are multiplied by the
    integer 0 (a Python int, kept as an integer tensor): ``beta * kl`` with ``beta = min(1,
    step // warmup)``. A float 0.0 is not counted (a weight set to 0 on purpose, or DDP's
    ``0.0 * sum(...)`` that puts unused parameters in the graph)."""
    terms = summed_terms(node, most=16) or []
    inside = [
        summed_terms(term.next_functions[0][0], most=16) or []
        for term, _ in terms
        if type(term).__name__ in REDUCTIONS and term.next_functions
    ]
    every = terms + [t for found in inside for t in found]
    return sum(
        1 for term, _ in every if type(term).__name__ == "MulBackward0" and _by_int_zero(term)
    )


def _by_int_zero(node: Any) -> bool:
    for name in ("_saved_other", "_saved_self"):
        try:
            factor = getattr(node, name)
        except (AttributeError, RuntimeError):  # freed, or another torch's names
            continue
        if (
            isinstance(factor, torch.Tensor)
            and factor.dim() == 0
            and factor.device.type == "cpu"
            and not factor.is_floating_point()
            and not factor.is_complex()
            and factor.dtype != torch.bool
            and int(factor) == 0
        ):
            return True
    return False


def loss_broadcast(
    fname: str, input_shape: Sequence[int], target_shape: Sequence[int]
) -> Finding | None:
    """An elementwise loss whose input and target broadcast to more elements than either has
    (prediction [N, 1] against target [N] makes [N, N]: every prediction against every
    target). A target that broadcasts to the input's shape (a scalar) is fine."""
    try:
        shape = torch.broadcast_shapes(tuple(input_shape), tuple(target_shape))
    except RuntimeError:
        return None
    n = math.prod(shape)
    if n <= max(math.prod(input_shape), math.prod(target_shape)):
        return None
    return Finding(
        "loss-broadcast",
        "error",
        f"{fname} compares input {list(input_shape)} with target {list(target_shape)}: they "
        f"broadcast to {list(shape)}, every prediction against every target",
        evidence={
            "function": fname,
            "input_shape": list(input_shape),
            "target_shape": list(target_shape),
            "broadcast_shape": list(shape),
        },
    )


def loss_broadcast_by_hand(shape: Sequence[int], broadcast: Sequence[int]) -> Finding:
    """A hand-written loss over the difference of a prediction ``shape`` ([N, 1] or [N]) and
    a target that broadcast to ``broadcast`` ([N, N]): see ``broadcast_difference``."""
    return Finding(
        "loss-broadcast",
        "error",
        f"the loss reduces a prediction {list(shape)} minus a tensor without gradients (the "
        f"target), which broadcast to {list(broadcast)}: every prediction against every target",
        evidence={"input_shape": list(shape), "broadcast_shape": list(broadcast)},
    )


_LOSS_TERMS = re.compile(
    r"(Mean|Sum|Pow|Abs|Mul|Div|Sqrt|Neg|Exp|Log|Log1P|Clamp|ClampMin|Relu|Softplus|Square"
    r"|Add|Sub|Rsub|Maximum|Minimum|Where)Backward\d+"
)
"""Autograd nodes a hand-written loss is made of between its difference and the scalar: the
reduction, squares and absolutes, weights, a sum of terms, the two sides of a quantile's
pinball loss (``torch.maximum(q * e, (q - 1) * e)``, or ``torch.where`` over the sign)."""


def broadcast_difference(
    loss: torch.Tensor, budget: int = 24
) -> tuple[list[int], list[int]] | None:
    """(prediction shape, broadcast shape) when ``loss`` reduces a difference of a prediction
    [N, 1] (or [N]) and a tensor without gradients that broadcast to [N, N]: the hand-written
    ``((pred - y) ** 2).mean()`` with ``y`` of shape [N] (or [N, 1]). Walks back from the loss
    through at most ``budget`` loss-term nodes; reads autograd metadata only (no host sync).
    A difference of two tensors with gradients (pairwise scores ``s[:, None] - s``) is not
    judged, nor one whose [N, 1] side was unsqueezed by the script (``x[:, None] - y[None]``)."""
    todo: list[Any] = [loss.grad_fn]
    seen = 0
    while todo and seen < budget:
        node = todo.pop()
        seen += 1
        name = type(node).__name__
        if node is None or not _LOSS_TERMS.fullmatch(name):
            continue
        inputs = [(f, i) for f, i in node.next_functions if f is not None]
        if name.startswith(("Sub", "Add")) and len(inputs) == 1:
            try:
                out = list(node._input_metadata[0].shape)
                f, i = inputs[0]
                shape = list(f._input_metadata[i].shape)
            except (AttributeError, IndexError, RuntimeError):  # another torch's internals
                return None
            n = shape[0] if shape else 0
            # x[:, None] or x.unsqueeze(1) made the [N, 1] on purpose: a pairwise difference
            # against the samples (energy distance, MMD), not a slip of shapes.
            paired = shape == [n, 1] and type(f).__name__ == "UnsqueezeBackward0"
            if n > 1 and out == [n, n] and shape in ([n], [n, 1]) and not paired:
                return shape, out
        todo.extend(f for f, _ in inputs)
    return None


VIEWS = re.compile(
    r"(Squeeze|SqueezeDim|Unsqueeze|View|UnsafeView|Reshape|ReshapeAlias|Alias|Select|Slice"
    r"|Expand|Permute|T|Transpose|Clone|ToCopy|Unbind)Backward\d+"
)
"""Autograd nodes of ops that move values without changing them."""


def cross_entropy_by_hand(node: Any) -> tuple[int, torch.Tensor] | None:
    """(C, targets) of a cross-entropy written by hand, ``node`` its loss's autograd node:
    ``-log_softmax(logits, d).gather(d, y[..., None]).mean()``, the minus and the mean over all
    elements in either order, a squeeze or view between (a behaviour-cloning or token loss
    that calls no loss function). C is the size of dim d; the targets are the gather's index.
    None for anything else: a policy gradient's log-probabilities times advantages, a masked
    or weighted sum. Read before the backward frees what the nodes saved; no host sync."""
    seen: set[str] = set()  # the minus and the mean, once each; views only below the first
    for _ in range(6):
        name = type(node).__name__
        if name == "GatherBackward0":
            break
        if name in ("NegBackward0", "MeanBackward0") and name not in seen:
            seen.add(name)
        elif not (seen and VIEWS.fullmatch(name)):
            return None
        node = node.next_functions[0][0] if node.next_functions else None
        if node is None:
            return None
    else:
        return None
    source: Any = node.next_functions[0][0] if node.next_functions else None
    if seen != {"NegBackward0", "MeanBackward0"} or type(source).__name__ != "LogSoftmaxBackward0":
        return None
    try:
        shape, index = source._saved_result.shape, node._saved_index
        dims = [_signed(source._saved_dim), _signed(node._saved_dim)]
    except (AttributeError, RuntimeError):  # saved tensors freed, or another torch's names
        return None
    if not shape or dims[0] % len(shape) != dims[1] % len(shape) or index.dim() != len(shape):
        return None
    dim = dims[0] % len(shape)
    if index.shape[dim] != 1:  # one target a row
        return None
    return int(shape[dim]), index.squeeze(dim)


REDUCTIONS = ("MeanBackward0", "MeanBackward1", "SumBackward0", "SumBackward1")


def minimised_log_likelihood(node: Any) -> str | None:
    """The form of a log-likelihood that the loss (``node``: its autograd node) adds with a
    positive factor and no minus: ``F.logsigmoid(x)`` or ``log_softmax(x, d).gather(d, y)``,
    reduced by means or sums (a view between). Minimised, such a term drives the probabilities
    it reads to 0, and falls without bound: a minus left out (BPR's ``-logsigmoid(pos - neg)``,
    a cross-entropy by hand). A term under a minus (``recon - logsigmoid(x).mean()``), times
    a negative constant or a tensor (a policy gradient's advantages) is not read. No host sync."""
    for term, factor in summed_terms(node) or []:
        if factor <= 0:
            continue
        reduced = False
        for _ in range(6):
            name = type(term).__name__
            if name not in REDUCTIONS and not (reduced and VIEWS.fullmatch(name)):
                break
            reduced = True
            term = term.next_functions[0][0] if term.next_functions else None
            if term is None:
                break
        name = type(term).__name__
        if not reduced:
            continue
        if name == "LogSigmoidBackward0":
            return "F.logsigmoid(x)"
        if name == "GatherBackward0" and term.next_functions:
            source = term.next_functions[0][0]
            if type(source).__name__ == "LogSoftmaxBackward0":
                return "log_softmax(x).gather(...)"
    return None


SCALARS = (
    "NegBackward0",
    "MeanBackward0",
    "MeanBackward1",
    "SumBackward0",
    "SumBackward1",
    "AddBackward0",
    "SubBackward0",
)
"""Nodes a loss is walked down through to a cross-entropy written by hand: a minus, a mean or
sum (over everything or over dims, in either order), a sum with other terms; and a product or
quotient by a constant (``MulBackward0``/``DivBackward0`` with one input needing no
gradient)."""


def soft_cross_entropies(node: Any, most: int = 32) -> list[tuple[list[int], int, Any, bool]]:
    """(shape, dim, targets) of each cross-entropy against soft targets written by hand below
    the loss's ``node``: a constant ``q`` times ``log_softmax(x, dim)`` (the minus on either
    side), reduced in any order (``torch.sum(-q * log_softmax(x, -1), -1).mean()``, timm's
    ``SoftTargetCrossEntropy``; ``(-q * logp).mean(0).sum()``; label smoothing and mixup by
    hand, a distillation against a teacher's probabilities); the log-softmax's input shape
    and dim, ``q`` as the product saved it, and whether a quotient by a constant of more than
    one value lies above it (``(mask * logp).sum(1) / mask.sum(1)``: each row's ``q`` divided
    by its count, as supervised contrastive losses write a mean over positives). Looked for
    within ``most`` nodes. Read before the backward frees what the nodes saved; no host sync."""
    todo, seen, found = [(node, False)], 0, []
    while todo and seen < most:
        node, divided = todo.pop()
        seen += 1
        name = type(node).__name__
        if name in ("MulBackward0", "DivBackward0") and _by_constant(node):
            one = _targets_times_log_softmax(node) if name == "MulBackward0" else None
            if one is not None:
                found.append((*one, divided))
                continue
            divided = divided or (name == "DivBackward0" and _by_values(node))
        elif name not in SCALARS:
            continue
        todo.extend((n, divided) for n, _ in node.next_functions if n is not None)
    return found


def _by_values(node: Any) -> bool:
    """A quotient (by a constant) whose divisor holds more than one value: rows divided each by
    its own."""
    divisor = getattr(node, "_saved_other", None)
    return isinstance(divisor, torch.Tensor) and divisor.numel() > 1


def _by_constant(node: Any) -> bool:
    """A product or quotient one of whose two inputs needs no gradient."""
    return sum(n is None for n, _ in node.next_functions) == 1


def _targets_times_log_softmax(node: Any) -> tuple[list[int], int, Any] | None:
    """``soft_cross_entropies``' result where the product ``node`` is a constant times a
    log-softmax (through a minus), the constant shaped as the log-softmax."""
    source = next(n for n, _ in node.next_functions if n is not None)
    if type(source).__name__ == "NegBackward0":
        source = source.next_functions[0][0]
    if type(source).__name__ != "LogSoftmaxBackward0":
        return None
    try:
        shape, dim = list(source._saved_result.shape), _signed(source._saved_dim)
        first, second = node._saved_self, node._saved_other
    except (AttributeError, RuntimeError):  # saved tensors freed, or another torch's names
        return None
    targets = first if isinstance(first, torch.Tensor) else second
    if not shape or not isinstance(targets, torch.Tensor) or list(targets.shape) != shape:
        return None
    return shape, dim % len(shape), targets


SCALED = re.compile(r"(Mul|Div|Add|Sub|Neg|MaskedFill|Clamp|Clamp(Min|Max))Backward\d+")
"""Nodes between a similarity matrix and the logits made of it: a temperature, a bias or a
correction added, a mask filled in."""


def in_batch_matrix(x: torch.Tensor, hops: int = 6) -> bool:
    """``x`` [B, B] is a matmul of two batches (``q @ k.T``), scaled or shifted on the way:
    in-batch similarities, each row's positive on the diagonal (the second batch may have no
    graph: a momentum encoder's keys). Not a bias-free layer's ``h @ W.T`` (its second factor
    a parameter), nor a ``cat`` of a positive column and
    negatives (MoCo's logits, whose positive is column 0)."""
    for node in _along_scaling(x.grad_fn, hops):
        name = type(node).__name__
        if name == "BmmBackward0" and not _one_product(node):
            return False  # products per row ([B, 32, D] @ [B, D, 1]: each row's candidates)
        if name in ("MmBackward0", "BmmBackward0"):  # ``@``, or ``einsum("bd,cd->bc")``
            second = node.next_functions[1][0] if len(node.next_functions) > 1 else None
            while second is not None and VIEWS.fullmatch(type(second).__name__):
                second = second.next_functions[0][0] if second.next_functions else None
            # (None: a batch without a graph, a momentum encoder's keys)
            weight = getattr(second, "variable", None)  # an AccumulateGrad's leaf
            return not isinstance(weight, torch.nn.Parameter)
    return False


def _along_scaling(node: Any, hops: int) -> Iterator[Any]:
    """``node``, then the nodes it comes from through its first input while each is a
    scaling, shift, mask or view (``SCALED``, ``VIEWS``), at most ``hops`` back."""
    for _ in range(hops + 1):
        if node is None:
            return
        yield node
        name = type(node).__name__
        if not (SCALED.fullmatch(name) or VIEWS.fullmatch(name)) or not node.next_functions:
            return
        node = node.next_functions[0][0]


def loss_term_zeroed(backwards: int) -> Finding:
    """On each of the run's ``backwards`` backwards, a term of the loss was multiplied by
    the integer 0."""
    return Finding(
        "loss-term-zeroed",
        "warning",
        f"on every backward of the run ({backwards}), a term of the loss was multiplied by "
        "the integer 0: it adds nothing and trains nothing; a weight computed by integer "
        "division (min(1, step // warmup) is 0 until warmup; step / warmup is meant), or an "
        "int weight left at 0",
        evidence={"backwards": backwards},
    )


def cosine_logits(x: torch.Tensor, hops: int = 6) -> bool:
    """``x`` is a scaled cosine similarity: a product ``a @ b`` (scaled or shifted on the way)
    of rows of one length by columns of one length (``s * F.normalize(h) @
    F.normalize(W).T``), read off the values the product's graph node keeps (one host
    sync)."""
    for node in _along_scaling(x.grad_fn, hops):
        if type(node).__name__ != "MmBackward0":
            continue
        try:
            rows, columns = node._saved_self, node._saved_mat2
        except (AttributeError, RuntimeError):  # freed, or another torch's names
            return False
        # A side is kept only where the other needs a gradient: one without, read off its
        # graph (``F.normalize``'s division by a norm).
        with torch.no_grad():  # (the scale may sit on either side: 10 * a @ b)
            return (
                _one_length(rows.float().norm(dim=1))
                if isinstance(rows, torch.Tensor)
                else _normalised(node.next_functions[0][0])
            ) and (
                _one_length(columns.float().norm(dim=0))
                if isinstance(columns, torch.Tensor)
                else _normalised(node.next_functions[1][0])
            )
    return False


def _normalised(node: Any, hops: int = 4) -> bool:
    """``node`` divides by a norm (``F.normalize``), through views and constant factors."""
    for step in _along_scaling(node, hops):
        if type(step).__name__ == "DivBackward0" and len(step.next_functions) > 1:
            return is_norm(step.next_functions[1][0])
    return False


def is_norm(node: Any) -> bool:
    """``node`` is a norm, or one expanded, cloned or clamped away from 0 (``F.normalize``'s
    divisor: expand_as, clamp_min, the norm)."""
    for _ in range(3):
        if node is None:
            return False
        if "Norm" in type(node).__name__:
            return True
        node = node.next_functions[0][0] if node.next_functions else None
    return False


def _one_length(lengths: torch.Tensor) -> bool:
    """Every length within 1e-3 of the longest (and more than one of them)."""
    if lengths.numel() < 2:
        return False
    top = float(lengths.max())
    return top > 0 and float(lengths.min()) > top * (1 - 1e-3)


def _one_product(node: Any) -> bool:
    """A ``bmm`` of one matrix product (a batch of 1: what ``einsum`` makes of a 2-D one)."""
    try:
        return int(node._saved_self.shape[0]) == 1
    except (AttributeError, RuntimeError):  # freed, or another torch's names
        return False


def in_batch_targets_constant(rows: int, target: int, calls: int) -> Finding:
    """Every one of the run's ``calls`` cross-entropies over in-batch similarities [rows,
    rows] on sampled steps had every target ``target``."""
    return Finding(
        "in-batch-targets-constant",
        "error",
        f"cross_entropy was given a [{rows}, {rows}] matrix of in-batch similarities (a matmul "
        f"of two batches) with every target {target}, on every sampled step ({calls}): in-batch "
        "negatives put each row's positive on the diagonal, so the targets are "
        f"torch.arange({rows}); with a constant {target} every row is told that its positive "
        f"is the batch's item {target}, which it cannot learn",
        evidence={"rows": rows, "target": target, "calls": calls},
    )


def summing_to_one(targets: torch.Tensor) -> list[int]:
    """The dims over which every row of ``targets`` sums to 1 (or -1, a minus taken first):
    where soft targets keep their classes. One host sync."""
    q = targets.detach().float()
    gaps = torch.stack([(q.sum(dim=d).abs() - 1).abs().max() for d in range(q.dim())])
    return [d for d, gap in enumerate(gaps.tolist()) if gap < 1e-3]


def _signed(dim: Any) -> int:
    """A dim an autograd node saved: -1 is kept as an unsigned 64-bit integer."""
    dim = int(dim)
    return dim - 2**64 if dim >= 2**63 else dim


def producer(x: torch.Tensor, ops: tuple[str, ...], hops: int = 6) -> Any:
    """The autograd node of one of ``ops`` (e.g. "SigmoidBackward0") that ``x`` comes from
    through at most ``hops`` view-like nodes (squeeze, view, select...) or selections of rows
    (``out[train_mask]``, ``index_select(0, idx)``), or None. No host sync."""
    found = _producer(x, ops, hops, rows=False)
    return found[0] if found is not None else None


def _producer(
    x: torch.Tensor, ops: tuple[str, ...], hops: int, rows: bool
) -> tuple[Any, int] | None:
    """``producer``'s node and the view-like nodes passed on the way to it; ``rows``: only
    selections that keep the last dim whole are passed (a mask over every dim flattens)."""
    node = x.grad_fn
    for passed in range(hops + 1):
        if node is None:
            return None
        name = type(node).__name__
        if name in ops:
            return node, passed
        if not (VIEWS.fullmatch(name) or selects(node, rows)) or not node.next_functions:
            return None
        node = node.next_functions[0][0]
    return None


def selects(node: Any, rows: bool) -> bool:
    """``node`` picks some of its input's entries along its leading dims: ``h[mask]`` (a
    GCN's training nodes, a detector's anchors left in), ``h[idx]``, ``h.index_select(0,
    idx)``. The values are those of its input; with ``rows``, only where it keeps the last dim
    whole (a mask over fewer dims than ``h``), each row as it was: a softmax's rows stay
    normalised over its classes."""
    name = type(node).__name__
    try:
        if name == "IndexSelectBackward0":
            return _signed(node._saved_dim) == 0
        if name != "IndexBackward0":
            return False
        first, *rest = node._saved_indices
        sizes = node._saved_self_sym_sizes
    except (AttributeError, RuntimeError, ValueError):  # another torch's names
        return False
    if first is None or any(i is not None for i in rest):
        return False
    return not rows or first.dtype != torch.bool or first.dim() < len(sizes)


def produced_by(x: torch.Tensor, op: str, hops: int = 6) -> bool:
    return producer(x, (op,), hops) is not None


def normalised_over(x: torch.Tensor) -> tuple[list[int], int, bool] | None:
    """(shape, dim, direct) of the ``log_softmax`` (or ``log`` of a ``softmax``, a constant
    added to it or not: skorch's classifier takes ``log(y_pred + eps)`` of a softmax its module
    ends in) that ``x`` comes from through views, as it was called; ``direct``: ``x`` is its
    output itself, no view between. None for anything else. No host sync."""
    found = _producer(x, ("LogSoftmaxBackward0", "LogBackward0"), 6, rows=True)
    node, passed = found if found is not None else (None, 0)
    if node is not None and type(node).__name__ == "LogBackward0":
        inner: Any = node.next_functions[0][0] if node.next_functions else None
        if type(inner).__name__ == "AddBackward0" and inner.next_functions[1][0] is None:
            inner = inner.next_functions[0][0]  # + a constant
        node = inner if type(inner).__name__ == "SoftmaxBackward0" else None
    if node is None:
        return None
    try:
        shape, dim = list(node._saved_result.shape), int(node._saved_dim)
    except (AttributeError, RuntimeError):  # saved tensors freed, or another torch's names
        return None
    if not shape:
        return None
    dim = _signed(dim)
    return shape, dim % len(shape), passed == 0


def softmax_over_wrong_dim(
    fname: str, shape: Sequence[int], dim: int, direct: bool, classes: int, last: bool = False
) -> Finding | None:
    """The input of ``fname`` was normalised over a dim of ``shape`` that is not the classes
    (the loss's dim 1, or its last with ``last`` (CTC's [T, N, C]), of size ``classes``): over
    the batch, say, by ``log_softmax(x, dim=0)`` or by a softmax without ``dim=`` on 3-D input
    (torch then picks dim 0). Read from the dim's size, which views (``.view(-1, C)``,
    ``.transpose(1, 2)``) and selections of rows (``out[train_mask]``) keep; when the input is
    the normalised tensor itself (``direct``), from the dim too, so a batch as large as the
    class count is no cover. A dim of the class dim's size behind a view passes."""
    class_dim = len(shape) - 1 if last else 1 if len(shape) >= 2 else 0
    wrong = shape[dim] != classes or (direct and dim != class_dim)
    if len(shape) < 2 or not wrong:
        return None
    over = f"the {classes} classes" + (f" (its dim {class_dim})" if direct else "")
    # (the batch's rows, CTC's frames [T, N, C], a [B, C, H, W] map's pixels)
    if last:
        others = "time steps" if dim == 0 else "examples"
    else:
        others = "examples" if dim == 0 else "positions"
    return Finding(
        "softmax-over-wrong-dim",
        "error",
        f"{fname} received log-probabilities normalised over dim {dim} of a {list(shape)} "
        f"tensor (size {shape[dim]}), not over {over}: each class's scores "
        f"are normalised against the other {others}, not the other classes",
        evidence={"function": fname, "shape": list(shape), "dim": dim, "classes": classes},
    )


def above_zero(x: torch.Tensor) -> float | None:
    """The largest value of ``x`` where log-probabilities (<= 0) belong, when it is clearly
    above 0 (raw logits); None for log-probabilities (fp16 rounding included). One host sync."""
    if not x.is_floating_point() or x.numel() == 0:
        return None
    top = float(x.detach().max())
    return top if top > 1e-3 else None


def ctc_targets_invalid(
    targets: Any, target_lengths: Any, blank: int, classes: int
) -> Finding | None:
    """CTC targets, within each target's length (``targets`` [N, S] padded, or [sum(lengths)]
    concatenated), that hold the ``blank`` index or an index outside [0, ``classes``): torch
    computes a loss for them without a word (the alignment treats a blank target as a label, and
    reads a row that is not there for one out of range). Padding past a target's length is not
    read and is fine. One host sync."""
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point():
        return None
    lengths = torch.as_tensor(target_lengths, device=targets.device).reshape(-1)
    if targets.dim() == 2 and lengths.numel() == targets.shape[0]:
        positions = torch.arange(targets.shape[1], device=targets.device)
        labels = targets[positions < lengths[:, None]]  # [sum(lengths)]
    elif targets.dim() == 1:
        labels = targets[: int(lengths.sum())]
    else:
        return None
    counts = torch.stack([(labels == blank).sum(), ((labels < 0) | (labels >= classes)).sum()])
    blanks, outside = counts.tolist()
    if not blanks and not outside:
        return None
    said = []
    if blanks:
        said.append(f"{blanks} are the blank index {blank}")
    if outside:
        said.append(f"{outside} are outside [0, {classes})")
    return Finding(
        "ctc-targets-invalid",
        "error",
        f"of the {labels.numel()} ctc_loss target labels within their target_lengths, "
        f"{' and '.join(said)}: torch computes a wrong loss for them without a word (labels "
        "numbered from 0, or padding counted in target_lengths?)",
        evidence={
            "blank": blank,
            "classes": classes,
            "blank_labels": blanks,
            "out_of_range_labels": outside,
            "labels": labels.numel(),
        },
    )


def ctc_infeasible(targets: Any, input_lengths: Any, target_lengths: Any) -> tuple[int, int] | None:
    """(samples, of ``N``) whose target cannot be aligned to their input: CTC needs a frame per
    label and one more for each label repeated next to itself (a blank between the two), so a
    target of length L with r such repeats needs L + r frames. Their loss is infinite, or 0
    with ``zero_infinity=True``. ``targets`` [N, S] padded, or [sum(lengths)] concatenated;
    None where the lengths do not read. One host sync."""
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point():
        return None
    device = targets.device
    lengths = torch.as_tensor(target_lengths, device=device).reshape(-1).long()
    frames = torch.as_tensor(input_lengths, device=device).reshape(-1).long()
    if lengths.numel() != frames.numel() or not lengths.numel():
        return None
    if targets.dim() == 2 and targets.shape[0] == lengths.numel():
        positions = torch.arange(1, targets.shape[1], device=device)  # [S - 1]
        repeats = ((targets[:, 1:] == targets[:, :-1]) & (positions < lengths[:, None])).sum(1)
    elif targets.dim() == 1:
        owner = torch.repeat_interleave(torch.arange(lengths.numel(), device=device), lengths)
        labels = targets[: owner.numel()]
        same = (labels[1:] == labels[:-1]) & (owner[1:] == owner[:-1])  # within one target
        repeats = torch.zeros_like(lengths).index_add_(0, owner[1:], same.long())
    else:
        return None
    return int((lengths + repeats > frames).sum()), lengths.numel()


MULTI_HOT_SUM = 1.05
"""A row of a cross-entropy's soft targets with two non-zero entries or more and a sum above
this is no distribution but a set of labels (a row summing to 1 is soft labels, label
smoothing, mixup or a normalised multi-hot; a row with one non-zero entry is a one-hot
weighted by hand)."""


def multi_hot(
    targets: torch.Tensor, dim: int, function: str, binary: bool = False
) -> Finding | None:
    """``multi-hot-into-cross-entropy`` where rows of ``targets`` over the classes' ``dim``
    hold two labels or more and are no distribution (``MULTI_HOT_SUM``): rows of values in
    [0, 1] (labels, or a sigmoid's probabilities), or of 0s and 1s only where ``binary`` (a
    cross-entropy written by hand, whose weights may be a policy's returns or advantages).
    One host read."""
    t = targets.detach().float()
    t = torch.where(t.amax() <= 0, -t, t)  # (-q, a minus taken first)
    labels, sums = (t != 0).sum(dim), t.sum(dim)
    kept = (t == 0) | (t == 1) if binary else (t >= 0) & (t <= 1 + 1e-3)
    rows = kept.all(dim) & (labels >= 2) & (sums > MULTI_HOT_SUM)
    stats = torch.stack([rows.sum(), labels.max(), torch.where(rows, sums, 0).max()])
    count, most, largest = stats.tolist()
    if not count:
        return None
    classes, total = int(t.shape[dim]), sums.numel()
    return Finding(
        "multi-hot-into-cross-entropy",
        "warning",
        f"{function} is given targets that are sets of labels, not distributions: "
        f"{int(count)} of {total} rows have 2 or more of the {classes} classes (up to "
        f"{int(most)}, summing to up to {largest:g}). A softmax shares one unit of probability "
        "among the classes, so against a row of k labels it learns 1/k for each, and the "
        "logits' level, which a softmax ignores, is left to drift: a threshold on "
        "sigmoid(logits) has no fixed meaning, and one on the softmax must fall below 1/k",
        evidence={"function": function, "rows": int(count), "of": total, "classes": classes},
    )


def given_tensors(tensors: Any) -> list[torch.Tensor]:
    """The tensors given to ``torch.autograd.backward`` or ``grad`` (or returned by
    ``GradScaler.scale``): a tensor, or those of a list or tuple. A generator
    (``model.parameters()``) is left unread, for torch to read whole."""
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    if isinstance(tensors, list | tuple):
        return [t for t in tensors if isinstance(t, torch.Tensor)]
    return []
