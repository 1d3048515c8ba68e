"""Child-Sum Tree-LSTM of Tai, Socher & Manning (2015), for trees of any fan-out, level-batched.

Gates read the node's word vector x and the sum of its children's states,
``h~ = sum_k h_k``; every child k keeps its own forget gate ``f_k = sigmoid(W_f x + U_f h_k + b_f)``.
Inner nodes of constituency trees have no word, so x = 0 there; dependency trees give every node
a word. Levels run as in ``tree_lstm.py``.

Shape letters: N nodes in the forest, L nodes in one level, U distinct words in the batch,
K most children of a node, E word vector size, D hidden size, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from treeqa.data.batching import TreeBatch
from treeqa.models.common import Dropout, Output, node_loss, word_embedding
from treeqa.models.tree_levels import LevelStates, child_slots, level_children


@dataclass(frozen=True)
class ChildSumConfig:
    name: str = "childsum"
    embed_dim: int = 300
    """Word vector size (set from the vectors file when one is given)."""
    hidden_dim: int = 150
    """Memory size D of every node (Tai et al. used 168 to match the LSTM's parameter count)."""
    dropout: float = 0.5
    """Dropout on node states, before the classifier."""
    num_classes: int = 5
    """5 for fine-grained, 2 for binary, 3 for binary3; set from the task."""
    sparse_embedding: bool = True
    """Sparse word-vector gradients: a step touches only its batch's rows, not the whole
    table (Adagrad takes them; set false for Adam)."""


class ChildSumTreeLSTM(nn.Module):
    """Child-Sum Tree-LSTM; logits for every node."""

    def __init__(self, config: ChildSumConfig, vocab_size: int, vectors: np.ndarray | None = None):
        super().__init__()
        self.config = config
        d = config.hidden_dim
        self.embed = word_embedding(vocab_size, config.embed_dim, vectors)
        self.embed.sparse = config.sparse_embedding
        # Input weights of all four gates in one Linear: x -> [i; o; u; f] (the biases live here).
        self.input = nn.Linear(config.embed_dim, 4 * d)
        self.hidden_iou = nn.Linear(d, 3 * d, bias=False)  # U_i, U_o, U_u on h~
        self.hidden_f = nn.Linear(d, d, bias=False)  # U_f on each child's h_k
        self.dropout = Dropout(config.dropout)
        self.classify = nn.Linear(d, config.num_classes)

    def cell(self, wx: torch.Tensor, iou_h: torch.Tensor, fc: torch.Tensor) -> torch.Tensor:
        """wx [L, 4D] input part, iou_h [L, 3D] U h~, fc [L, D] sum_k f_k c_k -> [L, 2D] [h; c]."""
        d = self.config.hidden_dim
        g = wx[:, : 3 * d] + iou_h  # [L, 3D]
        io = torch.sigmoid(g[:, : 2 * d])  # [L, 2D]
        c = io[:, :d] * torch.tanh(g[:, 2 * d :]) + fc  # [L, D]
        h = io[:, d:] * torch.tanh(c)  # [L, D]
        return torch.cat([h, c], 1)

    def forward(self, batch: TreeBatch) -> Output:
        n, d = batch.words.shape[0], self.config.hidden_dim
        kids = child_slots(batch)  # [N, K]
        # One matmul gives every node's input part, computed once per distinct word of the
        # batch: a node's input depends on its word alone, and on constituency trees every
        # inner node reads the same padding word (so theirs is just the bias).
        distinct, index = torch.unique(batch.words, return_inverse=True)  # [U], [N]
        wx = self.input(self.embed(distinct)).index_select(0, index)  # [N, 4D]
        leaves = batch.levels[0]
        wx_leaf = wx.index_select(0, leaves)  # [L0, 4D]
        # A leaf has no children: h~ = 0 and no forget terms.
        leaf = self.cell(wx_leaf, wx_leaf.new_zeros(()), wx_leaf.new_zeros(()))  # [L0, 2D]
        states = LevelStates(n, 2 * d, leaf)  # rows [h; c]
        states.write(leaves, leaf)
        for level, slots in zip(batch.levels[1:], level_children(batch, kids), strict=True):
            m, k = slots.shape
            hc = states.read(slots.reshape(-1)).view(m, k, 2 * d)  # [L, K, 2D]
            h_k, c_k = hc[:, :, :d], hc[:, :, d:]  # [L, K, D] each; zero for missing children
            wx_l = wx.index_select(0, level)  # [L, 4D]
            f = torch.sigmoid(wx_l[:, None, 3 * d :] + self.hidden_f(h_k))  # [L, K, D]
            # Missing children have c_k = 0, so their (non-zero) forget gates add nothing.
            fc = (f * c_k).sum(1)  # [L, D]
            states.write(level, self.cell(wx_l, self.hidden_iou(h_k.sum(1)), fc))
        h = states.read(torch.arange(n, device=wx.device))[:, :d]  # [N, D]
        logits = self.classify(self.dropout(h))  # [N, C]
        return Output(logits, node_loss(logits, batch.targets))
