"""What every model shares: the Output contract and word embeddings initialised from vectors."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import nn


class Output(NamedTuple):
    """Every model's ``forward(batch)`` returns this; ``loss`` is None when the batch has no labels."""

    logits: torch.Tensor
    loss: torch.Tensor | None


def word_embedding(vocab_size: int, dim: int, vectors: np.ndarray | None = None) -> nn.Embedding:
    """An embedding table [V, dim]; rows copied from ``vectors`` [V, dim] when given.

    Row 0 is padding and stays zero. Without vectors, rows are uniform(-0.05, 0.05) as for
    out-of-vocabulary words.
    """
    table = nn.Embedding(vocab_size, dim, padding_idx=0)
    with torch.no_grad():
        if vectors is not None:
            if vectors.shape != (vocab_size, dim):
                raise ValueError(
                    f"vectors have shape {vectors.shape}, expected {(vocab_size, dim)}"
                )
            table.weight.copy_(torch.from_numpy(vectors))
        else:
            table.weight.uniform_(-0.05, 0.05)
        table.weight[0].zero_()
    return table


def node_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
    """Mean cross-entropy over labelled nodes (target -1 is ignored); None if none is labelled.

    logits [N, C] raw scores (never probabilities), targets [N].
    """
    if not bool((targets >= 0).any()):
        return None
    return nn.functional.cross_entropy(logits, targets, ignore_index=-1)
