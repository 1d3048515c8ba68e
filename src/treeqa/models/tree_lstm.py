"""Constituency (binary N-ary) Tree-LSTM of Tai, Socher & Manning (2015), level-batched.

Leaves read word vectors; an inner node reads only its two children's states:
``c = i*u + f_l*c_l + f_r*c_r``, ``h = o*tanh(c)``, with one forget gate per child. A node
with one child (SST has none) reads it as its left child and the zero state as its right one;
a node with more than two is an error.
The forest runs one height at a time (``TreeBatch.levels``): every node of a height, across
the whole batch, is one set of tensor operations, and child states are gathered by index.

The inner levels run inside one autograd function (``_Forest``) with the backward written out:
on a CPU, autograd's bookkeeping for ~20 small operations per level cost as much as the
arithmetic, and the weight gradient becomes one matmul over every inner node of the forest
instead of one per level. Tests check it against the recursive reference and autograd.

Shape letters: N nodes in the forest, M inner nodes, L nodes in one level, U distinct words
among the leaves, E word vector size, D hidden size, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.autograd.function import FunctionCtx, once_differentiable

from treeqa.data.batching import TreeBatch
from treeqa.models.common import Dropout, Output, node_loss, word_embedding
from treeqa.models.tree_levels import LevelOrder, fixed_children, run_forest


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


class _Forest(torch.autograd.Function):
    """Leaf states -> h of every node in level order, with the backward written out.

    The state tables H, C are [N + 1, D] in level order, so a level's states are one slice;
    row N is the zero state of "no child". For each inner node it keeps x = [h_l; h_r], the
    gates g = [i; f_l; f_r; o] after the sigmoid, and v = [tanh(u); c_l; c_r; tanh(c)], so that
    c = sum of g[:3] * v[:3] and h = g[3] * v[3], and dL/dg = [dc; dc; dc; dh] * v.
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        leaf_h: torch.Tensor,  # [L0, D]
        leaf_c: torch.Tensor,  # [L0, D]
        weight: torch.Tensor,  # [5D, 2D]
        bias: torch.Tensor,  # [5D]
        plan: LevelOrder,
        kids: torch.Tensor,  # [M, 2] level-order positions of the children (N = none)
    ) -> torch.Tensor:
        d, m = leaf_h.shape[1], kids.shape[0]
        h_all = torch.cat([leaf_h, leaf_h.new_zeros(m + 1, d)])  # [N + 1, D]
        c_all = torch.cat([leaf_c, leaf_c.new_zeros(m + 1, d)])  # [N + 1, D]
        x = leaf_h.new_empty(m, 2 * d)  # [M, 2D]
        g = leaf_h.new_empty(m, 4 * d)  # [M, 4D]
        v = leaf_h.new_empty(m, 4 * d)  # [M, 4D]
        weight_t = weight.t()  # [2D, 5D]
        for kids_k, x_k, g_k, v_k, h_k, c_k in plan.levels([kids, x, g, v], [h_all, c_all]):
            kids_k = kids_k.reshape(-1)  # [2L], left then right child of each node
            torch.index_select(h_all, 0, kids_k, out=x_k.view(-1, d))
            pre_gates, pre_u = torch.addmm(bias, x_k, weight_t).split([4 * d, d], 1)
            torch.sigmoid(pre_gates, out=g_k)
            tanh_u, c_kids, tanh_c = v_k.split([d, 2 * d, d], 1)  # [L, D], [L, 2D], [L, D]
            torch.tanh(pre_u, out=tanh_u)
            c_kids.copy_(c_all.index_select(0, kids_k).view(-1, 2 * d))
            g3, o = g_k.split([3 * d, d], 1)
            torch.sum((g3 * v_k[:, : 3 * d]).view(-1, 3, d), 1, out=c_k)  # i*tanh(u) + f*c_kids
            torch.tanh(c_k, out=tanh_c)
            torch.mul(o, tanh_c, out=h_k)
        ctx.save_for_backward(weight, x, g, v, kids)
        ctx.plan = plan  # type: ignore[attr-defined]
        return h_all[:-1]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[Any, ...]:
        weight, x, g, v, kids = ctx.saved_tensors
        plan: LevelOrder = ctx.plan
        d, m = grad_h.shape[1], x.shape[0]
        dh_all = torch.cat([grad_h, grad_h.new_zeros(1, d)])  # [N + 1, D]
        dc_all = torch.zeros_like(dh_all)  # [N + 1, D]
        d_pre = grad_h.new_empty(m, 5 * d)  # [M, 5D] gradient before the sigmoid and tanh
        one = grad_h.new_ones(())
        levels = plan.levels([kids, d_pre, g, v], [dh_all, dc_all])
        for kids_k, dp_k, g_k, v_k, dh, dc in reversed(levels):  # top down
            kids_k = kids_k.reshape(-1)  # [2L]
            i, f, o = g_k.split([d, 2 * d, d], 1)
            tanh_u, _, tanh_c = v_k.split([d, 2 * d, d], 1)
            dc = torch.addcmul(dc, dh * o, torch.addcmul(one, tanh_c, tanh_c, value=-1))
            dp_gates, dp_u = dp_k.split([4 * d, d], 1)
            sigmoid_slope = torch.addcmul(g_k, g_k, g_k, value=-1)  # g * (1 - g)
            torch.mul(torch.cat([dc, dc, dc, dh], 1) * v_k, sigmoid_slope, out=dp_gates)
            torch.mul(dc * i, torch.addcmul(one, tanh_u, tanh_u, value=-1), out=dp_u)
            dh_all.index_add_(0, kids_k, (dp_k @ weight).view(-1, d))  # [2L, D]
            dc_all.index_add_(0, kids_k, (torch.cat([dc, dc], 1) * f).view(-1, d))  # [2L, D]
        n0 = plan.sizes[0]
        d_weight = d_pre.t() @ x  # [5D, 2D], one matmul over every inner node
        return dh_all[:n0], dc_all[:n0], d_weight, d_pre.sum(0), None, None


class TreeLSTM(nn.Module):
    """Binary Tree-LSTM over constituency trees; logits for every node."""

    def __init__(self, config: TreeLSTMConfig, vocab_size: int, vectors: np.ndarray | None = None):
        super().__init__()
        self.config = config
        d = config.hidden_dim
        self.embed = word_embedding(vocab_size, config.embed_dim, vectors)
        self.embed.sparse = config.sparse_embedding
        # Tai et al.'s leaf module (BinaryTreeLSTM.lua): c = W_c x, o = sigmoid(W_o x),
        # h = o * tanh(c); one Linear gives [c; o]. Their code, not the paper's equations with
        # zero-state children (which would give c = i * u).
        self.leaf = nn.Linear(config.embed_dim, 2 * d)
        # One fused Linear for all five gates of an inner node: [h_l; h_r] -> [i; f_l; f_r; o; u].
        # Its default init differs from their code's, which sums one Linear per child for each
        # gate: weights uniform(+-1/sqrt(2D)) here against +-1/sqrt(D) there, and one bias draw
        # against the sum of two.
        self.compose = nn.Linear(2 * d, 5 * d)
        self.dropout = Dropout(config.dropout)
        self.classify = nn.Linear(d, config.num_classes)

    def leaf_states(self, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """words [L] -> h, c [L, D] each.

        A leaf's state depends on its word alone, so each distinct word of the batch is
        computed once (on SST train, 60% of the leaves at batch 25, 38% at batch 256).
        """
        d = self.config.hidden_dim
        distinct, index = torch.unique(words, return_inverse=True)  # [U], [L]
        # split/chunk rather than slicing: their backward is one cat, where each slice's
        # backward would zero-fill a full-size gradient.
        c, o = self.leaf(self.embed(distinct)).split(d, 1)  # [U, D] each
        h = torch.sigmoid(o) * torch.tanh(c)  # [U, D]
        return h.index_select(0, index), c.index_select(0, index)  # [L, D] each

    def forward(self, batch: TreeBatch) -> Output:
        plan = LevelOrder.of(batch)
        kids = fixed_children(batch, plan, arity=2)  # [M, 2]
        leaf_h, leaf_c = self.leaf_states(batch.words[plan.leaves])  # [L0, D] each
        w, b = self.compose.weight, self.compose.bias
        h = run_forest(_Forest, [leaf_h, leaf_c], w.dtype, w, b, plan, kids)  # [N, D] level order
        logits = self.classify(self.dropout(h)).index_select(0, plan.position)  # [N, C] node order
        return Output(logits, node_loss(logits, batch.targets))
