"""Answer spans from pointer logits: the best (start, end) pair within a length limit, and
the SQuAD 2.0 choice between that span and the no-answer slot. Used by training-time
evaluation, ``treeqa evaluate qa`` and ``treeqa predict qa``.

Shape letters: B batch, L context tokens.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from treeqa.models.qanet import NEG


def best_spans(
    start_logits: torch.Tensor, end_logits: torch.Tensor, mask: torch.Tensor, max_len: int = 30
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The span (i, j), i <= j < i + max_len, maximising start[i] + end[j], for every row.

    start_logits, end_logits [B, L], mask [B, L] bool (True = real token). Returns start [B],
    end [B] (inclusive) and score [B] = start[i] + end[j] (log-probabilities in, log-prob out).
    """
    length = start_logits.size(1)
    s = start_logits.float().masked_fill(~mask, NEG)  # [B, L]
    e = end_logits.float().masked_fill(~mask, NEG)  # [B, L]
    # Only the band j - i < K is scored, so a long context costs B*L*K, not B*L*L.
    width = min(max_len, length)  # K
    ends = torch.nn.functional.pad(e, (0, width - 1), value=NEG).unfold(1, width, 1)  # [B, L, K]
    scores = s[:, :, None] + ends  # [B, L, K]; [i, k] scores the span (i, i + k)
    score, flat = scores.flatten(1).max(1)  # [B]; ties: the first in (i, j) order, as before
    start = flat // width
    return start, start + flat % width, score


class Decoded(NamedTuple):
    """The chosen answers of a batch; start = end = -1 where the choice is no answer."""

    start: torch.Tensor  # [B]
    end: torch.Tensor  # [B]
    score: torch.Tensor  # [B] log p(start) + log p(end) of the choice
    no_answer_margin: torch.Tensor  # [B] no-answer score minus the best span's (-inf without)


def decode(
    logits: torch.Tensor, mask: torch.Tensor, max_len: int, no_answer: bool, threshold: float = 0.0
) -> Decoded:
    """Best spans from logits [B, 2, L(+1)]; with ``no_answer`` a row answers nothing when the
    no-answer score beats the best span's by more than ``threshold`` (``math.inf``: never)."""
    logp = logits.float().log_softmax(2)  # [B, 2, L(+1)]; each row normalised once
    length = mask.size(1)
    start, end, score = best_spans(logp[:, 0, :length], logp[:, 1, :length], mask, max_len)
    margin = torch.full_like(score, -math.inf)
    if no_answer:
        none = logp[:, 0, length] + logp[:, 1, length]  # [B]
        margin = none - score
        empty = margin > threshold
        start, end = start.masked_fill(empty, -1), end.masked_fill(empty, -1)
        score = torch.where(empty, none, score)
    return Decoded(start, end, score, margin)
