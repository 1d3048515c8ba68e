"""Bag-of-words sentiment baseline: each node is the average of the word vectors under it.

It gives logits for every node, like the tree models, so it trains and evaluates through
the same path. Being linear in the averaged embedding, it cannot model negation.
Shape letters: N nodes in the forest, D embedding size, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from treeqa.data.batching import TreeBatch
from treeqa.models.common import Dropout, Output, node_loss, word_embedding


@dataclass(frozen=True)
class BowConfig:
    name: str = "bow"
    embed_dim: int = 50
    """Word vector size (must match the vectors file when one is given)."""
    dropout: float = 0.5
    """Dropout on the averaged embedding, before the classifier."""
    num_classes: int = 5
    """5 for fine-grained, 2 for binary, 3 for binary3; set from the task."""


class BagOfWords(nn.Module):
    def __init__(self, config: BowConfig, vocab_size: int, vectors: np.ndarray | None = None):
        super().__init__()
        self.config = config
        self.embed = word_embedding(vocab_size, config.embed_dim, vectors)
        self.dropout = Dropout(config.dropout)
        self.classify = nn.Linear(config.embed_dim, config.num_classes)

    def forward(self, batch: TreeBatch) -> Output:
        # Nodes with a word: a constituency tree's leaves, every node of a dependency tree.
        has_word = (batch.words != 0).unsqueeze(1).to(self.embed.weight.dtype)  # [N, 1]
        x = self.embed(batch.words) * has_word  # [N, D], zero at wordless inner nodes
        # Subtrees are contiguous in pre-order, so a node's word sum is a difference of prefix sums.
        sums = torch.cat([x.new_zeros(1, x.shape[1]), x.cumsum(0)])  # [N + 1, D]
        counts = torch.cat([has_word.new_zeros(1, 1), has_word.cumsum(0)])  # [N + 1, 1]
        start = torch.arange(len(batch.words), device=x.device)  # [N]
        mean = (sums[batch.subtree_end] - sums[start]) / (
            counts[batch.subtree_end] - counts[start]
        ).clamp_min(1)  # [N, D]
        logits = self.classify(self.dropout(mean))  # [N, C]
        return Output(logits, node_loss(logits, batch.targets))
