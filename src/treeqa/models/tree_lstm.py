"""Constituency (binary N-ary) Tree-LSTM of Tai, Socher & Manning (2015), level-batched.

Leaves read word vectors; an inner node reads only its two children's states:
``c = i*u + f_l*c_l + f_r*c_r``, ``h = o*tanh(c)``, with one forget gate per child.
The forest runs one height at a time (``TreeBatch.levels``): every node of a height, across
the whole batch, is one set of tensor operations, and child states are gathered by index
(``tree_levels.LevelStates``).

Shape letters: N nodes in the forest, L nodes in one level, U distinct words among the
leaves, K children per node, E word vector size, D hidden size, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from treeqa.data.batching import TreeBatch
from treeqa.models.common import Output, node_loss, word_embedding
from treeqa.models.tree_levels import LevelStates, child_slots, level_children


@dataclass(frozen=True)
class TreeLSTMConfig:
    name: str = "tree_lstm"
    embed_dim: int = 300
    """Word vector size (set from the vectors file when one is given)."""
    hidden_dim: int = 150
    """Memory size D of every node (Tai et al.: 150 for the constituency Tree-LSTM)."""
    dropout: float = 0.5
    """Dropout on node states, before the classifier."""
    num_classes: int = 5
    """5 for fine-grained, 2 for binary, 3 for binary3; set from the task."""
    sparse_embedding: bool = True
    """Sparse word-vector gradients: a step touches only its batch's rows, not the whole
    table (Adagrad takes them; set false for Adam)."""


class TreeLSTM(nn.Module):
    """Binary Tree-LSTM over constituency trees; logits for every node."""

    def __init__(self, config: TreeLSTMConfig, vocab_size: int, vectors: np.ndarray | None = None):
        super().__init__()
        self.config = config
        d = config.hidden_dim
        self.embed = word_embedding(vocab_size, config.embed_dim, vectors)
        self.embed.sparse = config.sparse_embedding
        # Tai et al.'s leaf module (BinaryTreeLSTM.lua): c = W_c x, o = sigmoid(W_o x),
        # h = o * tanh(c); one Linear gives [c; o].
        self.leaf = nn.Linear(config.embed_dim, 2 * d)
        # One fused Linear for all five gates of an inner node: [h_l; h_r] -> [i; f_l; f_r; o; u].
        self.compose = nn.Linear(2 * d, 5 * d)
        self.dropout = nn.Dropout(config.dropout)
        self.classify = nn.Linear(d, config.num_classes)

    def leaf_states(self, words: torch.Tensor) -> torch.Tensor:
        """words [L] -> [L, 2D] rows [h; c].

        A leaf's state depends on its word alone, so each distinct word of the batch is
        computed once (on SST train, 60% of the leaves at batch 25, 38% at batch 256).
        """
        d = self.config.hidden_dim
        distinct, index = torch.unique(words, return_inverse=True)  # [U], [L]
        # split/chunk rather than slicing: their backward is one cat, where each slice's
        # backward would zero-fill a full-size gradient.
        c, o = self.leaf(self.embed(distinct)).split(d, 1)  # [U, D] each
        h = torch.sigmoid(o) * torch.tanh(c)  # [U, D]
        return torch.cat([h, c], 1).index_select(0, index)  # [L, 2D]

    def node_states(self, kids: torch.Tensor) -> torch.Tensor:
        """kids [L, 2, 2D] children's [h; c] -> [L, 2D] rows [h; c]."""
        d, n = self.config.hidden_dim, kids.shape[0]
        h_kids, c_kids = kids.split(d, 2)  # [L, 2, D] each
        sig, u = self.compose(h_kids.reshape(n, 2 * d)).split([4 * d, d], 1)  # [L, 4D], [L, D]
        i, f_l, f_r, o = torch.sigmoid(sig).chunk(4, 1)  # [L, D] each
        c_l, c_r = c_kids.unbind(1)  # [L, D] each
        c = i * torch.tanh(u) + f_l * c_l + f_r * c_r  # [L, D]
        h = o * torch.tanh(c)  # [L, D]
        return torch.cat([h, c], 1)

    def forward(self, batch: TreeBatch) -> Output:
        n, d = batch.words.shape[0], self.config.hidden_dim
        kids = child_slots(batch, arity=2)  # [N, 2]
        leaves = batch.levels[0]
        leaf = self.leaf_states(batch.words[leaves])  # [L0, 2D]
        states = LevelStates(n, 2 * d, leaf)  # rows [h; c]
        states.write(leaves, leaf)
        for level, slots in zip(batch.levels[1:], level_children(batch, kids), strict=True):
            hc = states.read(slots.reshape(-1)).view(-1, 2, 2 * d)  # [L, 2, 2D]
            states.write(level, self.node_states(hc))
        h = states.read(torch.arange(n, device=leaf.device))[:, :d]  # [N, D]
        logits = self.classify(self.dropout(h))  # [N, C]
        return Output(logits, node_loss(logits, batch.targets))
