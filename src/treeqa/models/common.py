"""What every model shares: the Output contract, word embeddings initialised from vectors, and
a dropout whose CPU mask is cheaper than torch's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import torch
from torch import nn


class Output(NamedTuple):
    """Every model's ``forward(batch)`` returns this; ``loss`` is None when the batch has no labels."""

    logits: torch.Tensor
    loss: torch.Tensor | None


@contextmanager
def inference(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode (no dropout: the same input, the same answer) without autograd,
    put back in the mode it was in after, whatever happens inside."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


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


class Dropout(nn.Dropout):
    """``nn.Dropout`` whose CPU mask costs a quarter of the random draws.

    torch's CPU dropout draws one number from its Mersenne Twister per element, which took ~8%
    of a Tree-LSTM training step on SST. This mask compares the four 16-bit fields of random
    64-bit words with a threshold, so the drop probability is ``p`` rounded to 1/65536. On a GPU
    it is ``nn.functional.dropout``. Seeded by ``torch.manual_seed`` like any torch sampling.
    An ``nn.Dropout`` still, for whatever looks for one (the health monitor's mode checks).
    """

    def __init__(self, p: float):
        if not 0 <= p < 1:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        super().__init__(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if x.device.type != "cpu":
            return nn.functional.dropout(x, self.p, True)
        n = x.numel()
        words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)  # [W]
        fields = words.view(torch.int16)[:n].view(x.shape)  # uniform over int16
        keep = fields >= round(self.p * 65536) - 32768
        scale = 1 / (1 - self.p)
        if x.dtype != torch.float32:  # bfloat16 autocast: kept in x's dtype, scaled once
            return x * keep * scale
        return x * (keep * scale)  # one saved mask, one multiply backward
