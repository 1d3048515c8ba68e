"""Whether a language model's position sees the token after it, read from the gradient.

``causal.py`` reads a causal model's attention calls and RNNs; a leak of the next token by
other means (a convolution padded on both sides, a Temporal Convolutional Network without its
``Chomp1d``, token mixing over time by a Linear, an unmasked layer among masked ones, attention
normalised without a softmax) shows in none of them. The gradient shows it: the logits of
position p, of one row, are differentiated (``torch.autograd.grad``, the graph retained for the
script's own backward) with respect to the Embedding's output for that row's tokens, and the
norm of the gradient at each token is read. A causal model's is exactly 0 at every token after
p (a mask's -inf gives a probability of exactly 0; one applied after the softmax and
renormalised leaves 1e-9 of the largest); one that sees its next token reads it at a tenth or
more of what it reads of its own (a convolution padded on both sides: 0.27 at the first step,
0.9 once it has learned to copy).

Statistics over the whole sequence reach every later token a little and alike: batch norm over
time in a causal convolution (3e-3 of the largest over 16 sequences of 32 tokens; 0.04 over 2
of 16), a text VAE's latent, which reads the whole sentence (1e-5 at the next token, 0.13 over
all later ones at the first step). So the next token must reach ``AHEAD`` of the largest and
``STANDS_OUT`` times the median of the tokens after it; between that and ``CAUSAL`` the
gradient decides nothing, and the attention reads stand (an unmasked attention at the first
step reads each later token at about 1/T).

Coordinates: ids ``[B, T]``; the loss's input rows as the targets are laid out, ``[N, C]``
(``N`` = B x T', flattened batch first, or time first) or ``[B, C, T']`` (``[T', C, B]`` time
first), T' = T or T - 1; the Embedding's outputs ``[B, T, E]`` (or ``[T, B, E]``).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn

from treeqa.health.processes import world_size

AHEAD = 0.1
"""Share of the largest gradient at a token up to p that the gradient at token p + 1 must reach
for position p to see it."""
STANDS_OUT = 1.5
"""Times the median gradient at the tokens after p + 1 that the next token's must reach too."""
CAUSAL = 1e-6
"""Share of the largest gradient at a token up to p below which no later token is read."""


PROBES = 8
"""Sampled steps a run on which the gradient is read, at most."""

_GRAD = torch.autograd.grad
"""Taken at import, before a monitor wraps it: this read is no gradient the script took."""


class Verdicts:
    """The gradient's verdicts, per model (held weakly: a model freed takes its verdicts with
    it) and per kind of step (``like``: what its attention reads said, its length)."""

    def __init__(self) -> None:
        self.known: weakref.WeakKeyDictionary[nn.Module, dict[Any, tuple[bool, float]]]
        self.known = weakref.WeakKeyDictionary()
        self.tries: weakref.WeakKeyDictionary[nn.Module, dict[Any, int]]
        self.tries = weakref.WeakKeyDictionary()  # steps like it seen while it had none
        self.reads = 0  # gradients taken this run

    def of(
        self,
        model: nn.Module,
        like: Any,
        logits: Any,
        looked_up: list[tuple[torch.Tensor, bool]],
        supervised: torch.Tensor,
        time_first: bool,
    ) -> tuple[bool, float] | None:
        """``model``'s verdict on steps ``like`` this one: read once it is known; until then
        on the 1st, 2nd, 4th, 8th ... such step of those sampled, ``PROBES`` a run at most (a
        leak a model learns to use stands out later in the run: linear attention over the
        whole sequence's sums), where the Embedding's outputs were kept (``looked_up``), and
        not under DDP or FSDP (whose backward hooks talk to the other processes). A verdict
        holds for steps like the one it was read on: a model masked at a first length and
        unmasked at a later one, or given a padding mask in place of the causal one only where
        a batch has padding, is read again."""
        known = self.known.setdefault(model, {}).get(like)
        if known is not None or not looked_up or self.reads >= PROBES:
            return known
        counts = self.tries.setdefault(model, {})
        tries = counts[like] = counts.get(like, 0) + 1
        if tries & (tries - 1) or not isinstance(logits, torch.Tensor) or world_size() > 1:
            return None
        self.reads += 1
        found = sees_ahead(logits, looked_up, supervised, time_first)
        if found is not None:
            self.known[model][like] = found
        return found


def sees_ahead(
    logits: torch.Tensor,
    looked_up: list[tuple[torch.Tensor, bool]],
    supervised: torch.Tensor,
    time_first: bool,
) -> tuple[bool, float] | None:
    """Whether a position of the row with the most ``supervised`` positions ([B, T - 1], of
    queries 0 .. T - 2) sees the token after it: (True, share) where it reads it, (False, 0.0)
    where it reads no later token, None where the gradient does not decide or cannot be
    taken. ``logits``: the loss's input; ``looked_up``: the Embedding's outputs for the ids,
    each with whether it is batch first; ``time_first``: how the targets are flattened. The
    position is an even one nearest the middle of the row's supervised ones: the last
    position of a block of 2, 4, 8 ... (attention open within blocks, a window's end) is odd,
    and reads no later token even where the block's others do (a middle of 7 was the end of a
    block of 4, and cleared the leak). One row: the batch's other rows, read at once, mix into
    its gradient where batch norm joins them. One host read after the gradient."""
    b, queries = supervised.shape
    t = queries + 1
    row = int(supervised.sum(1).argmax())
    positions = supervised[row].nonzero().flatten().tolist()
    if not positions:
        return None
    middle = positions[len(positions) // 2]
    p = min([q for q in positions if q % 2 == 0] or positions, key=lambda q: abs(q - middle))
    weights = _weights(logits, b, t, row, p, time_first)
    outputs = [out for out, _ in looked_up]
    if weights is None or not all(out.requires_grad for out in outputs):
        return None
    try:
        grads = _GRAD(logits, outputs, weights, retain_graph=True, allow_unused=True)
    except RuntimeError:  # (reentrant activation checkpointing takes no torch.autograd.grad)
        return None
    norms = [
        (g if first else g.transpose(0, 1)).float().norm(dim=-1)  # [B, T]
        for g, (_, first) in zip(grads, looked_up, strict=True)
        if g is not None and g.dim() >= 3
    ]
    if not norms or any(n.shape != (b, t) for n in norms):
        return None
    norm = torch.stack(norms).square().sum(0).sqrt()[row]  # [T]
    later = norm[p + 1 :]
    far = later[1:].median() if len(later) > 2 else torch.zeros((), device=norm.device)
    own, nxt, most, far_ = torch.stack([norm[: p + 1].max(), later[0], later.max(), far]).tolist()
    if own <= 0:
        return None
    if nxt >= max(AHEAD * own, STANDS_OUT * far_):
        return True, nxt / own
    if most <= CAUSAL * own:
        return False, 0.0
    return None


def _weights(
    logits: torch.Tensor, b: int, t: int, row: int, p: int, time_first: bool
) -> torch.Tensor | None:
    """The gradient's weights on ``logits``: a fixed random vector over the classes at (row,
    position p), 0 elsewhere; None where the layout is not one of the module's."""
    if not logits.is_floating_point() or not logits.requires_grad:
        return None
    weights = torch.zeros_like(logits)
    n = logits.shape[0] * (logits.shape[2] if logits.dim() == 3 else 1)
    for length in (t, t - 1):  # targets of every position, or of all but the last
        if n != b * length:
            continue
        at: tuple[int | slice, ...]
        if logits.dim() == 2:
            at = (p * b + row,) if time_first else (row * length + p,)
        elif logits.dim() == 3 and logits.shape[::2] == (
            (length, b) if time_first else (b, length)
        ):
            at = (p, slice(None), row) if time_first else (row, slice(None), p)
        else:
            return None
        drawn = torch.randn(logits.shape[1], generator=torch.Generator().manual_seed(0))
        weights[at] = drawn.to(weights.dtype)
        return weights
    return None
