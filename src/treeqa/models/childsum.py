"""Child-Sum Tree-LSTM of Tai, Socher & Manning (2015), for trees of any fan-out, level-batched.

Gates read the node's word vector x and the sum of its children's states,
``h~ = sum_k h_k``; every child k keeps its own forget gate ``f_k = sigmoid(W_f x + U_f h_k + b_f)``.
Inner nodes of constituency trees have no word, so x = 0 there; dependency trees give every node
a word. The inner levels run inside one autograd function (``_Forest``) with the backward
written out, as in ``tree_lstm.py``.

Shape letters: N nodes in the forest, M inner nodes, L nodes in one level, U distinct words in
the batch, S child slots (one per non-root node), E word vector size, D hidden size, C classes.
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
from treeqa.models.tree_levels import ChildSlots, LevelOrder, run_forest


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


class _Forest(torch.autograd.Function):
    """Leaf states -> h of every node in level order, with the backward written out.

    ``wx`` [M, 4D] is each inner node's input part [i; o; u; f] (computed outside, by
    autograd). Children are read through the forest's real child slots (``ChildSlots``, S in
    all), so a node's fan-out costs what it has, not the batch's widest node: each slot keeps
    its child's h and c and its forget gate; each inner node keeps h~ = sum_k h_k, the gates
    i, o, tanh(u) and tanh(c).
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        leaf_h: torch.Tensor,  # [L0, D]
        leaf_c: torch.Tensor,  # [L0, D]
        wx: torch.Tensor,  # [M, 4D]
        u_iou: torch.Tensor,  # [3D, D]
        u_f: torch.Tensor,  # [D, D]
        plan: LevelOrder,
        slots: ChildSlots,
    ) -> torch.Tensor:
        d, m, s = leaf_h.shape[1], wx.shape[0], slots.child.shape[0]
        h_all = torch.cat([leaf_h, leaf_h.new_zeros(m + 1, d)])  # [N + 1, D]
        c_all = torch.cat([leaf_c, leaf_c.new_zeros(m + 1, d)])  # [N + 1, D]
        h_kids, c_kids, f = (leaf_h.new_empty(s, d) for _ in range(3))  # [S, D] each
        h_sum = leaf_h.new_zeros(m, d)  # [M, D]
        gates = leaf_h.new_empty(m, 3 * d)  # [M, 3D] i, o, tanh(u)
        tanh_c = leaf_h.new_empty(m, d)  # [M, D]
        inner = plan.levels([wx, h_sum, gates, tanh_c], [h_all, c_all])
        for (where, row, hk, ck, f_k), (wx_k, hs_k, g_k, tc_k, h_k, c_k) in zip(
            slots.levels([h_kids, c_kids, f]), inner, strict=True
        ):  # [S_l], [S_l], [S_l, D] x3; [L, 4D], [L, D], [L, 3D], [L, D], [L, D] x2
            torch.index_select(h_all, 0, where, out=hk)
            torch.index_select(c_all, 0, where, out=ck)
            wx_iou, wx_f = wx_k.split([3 * d, d], 1)
            torch.sigmoid(torch.addmm(wx_f.index_select(0, row), hk, u_f.t()), out=f_k)
            hs_k.index_add_(0, row, hk)  # h~ = sum_k h_k
            pre = torch.addmm(wx_iou, hs_k, u_iou.t())  # [L, 3D]
            pre_io, pre_u = pre.split([2 * d, d], 1)
            i_o, tanh_u = g_k.split([2 * d, d], 1)
            torch.sigmoid(pre_io, out=i_o)
            torch.tanh(pre_u, out=tanh_u)
            i, o = i_o.chunk(2, 1)
            torch.mul(i, tanh_u, out=c_k).index_add_(0, row, f_k * ck)  # c = i*u + sum f_k*c_k
            torch.tanh(c_k, out=tc_k)
            torch.mul(o, tc_k, out=h_k)
        ctx.save_for_backward(u_iou, u_f, h_kids, c_kids, f, h_sum, gates, tanh_c)
        ctx.plan, ctx.slots = plan, slots  # type: ignore[attr-defined]
        return h_all[:-1]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[Any, ...]:
        u_iou, u_f, h_kids, c_kids, f, h_sum, gates, tanh_c = ctx.saved_tensors
        plan: LevelOrder = ctx.plan
        slots: ChildSlots = ctx.slots
        d, m = grad_h.shape[1], gates.shape[0]
        dh_all = torch.cat([grad_h, grad_h.new_zeros(1, d)])  # [N + 1, D]
        dc_all = torch.zeros_like(dh_all)  # [N + 1, D]
        d_wx = grad_h.new_zeros(m, 4 * d)  # [M, 4D] gradient of the pre-activations
        d_f = torch.empty_like(f)  # [S, D] forget gates, before the sigmoid
        inner = plan.levels([d_wx, gates, tanh_c], [dh_all, dc_all])
        levels = zip(slots.levels([d_f, c_kids, f]), inner, strict=True)
        for (where, row, d_f_k, ck, f_k), (d_wx_k, g_k, tc_k, dh, dc) in reversed(
            list(levels)
        ):  # top down; [S_l], [S_l], [S_l, D] x3; [L, 4D], [L, 3D], [L, D] x3
            i, o, tanh_u = g_k.split([d, d, d], 1)
            dc = dc + dh * o * (1 - tc_k * tc_k)  # through h = o * tanh(c)
            d_iou, d_fk = d_wx_k.split([3 * d, d], 1)
            slopes = torch.cat([i * (1 - i), o * (1 - o), 1 - tanh_u * tanh_u], 1)  # [L, 3D]
            torch.mul(torch.cat([dc * tanh_u, dh * tc_k, dc * i], 1), slopes, out=d_iou)
            dc_slot = dc.index_select(0, row)  # [S_l, D] the parent's dc at each slot
            torch.mul(dc_slot * ck, f_k * (1 - f_k), out=d_f_k)  # [S_l, D]
            d_fk.index_add_(0, row, d_f_k)
            # Every child gets U_iou's share of h~ and its own forget gate's share.
            d_h_kids = torch.addmm((d_iou @ u_iou).index_select(0, row), d_f_k, u_f)  # [S_l, D]
            dh_all.index_add_(0, where, d_h_kids)
            dc_all.index_add_(0, where, dc_slot * f_k)
        n0 = plan.sizes[0]
        d_u_iou = d_wx[:, : 3 * d].t() @ h_sum  # [3D, D], one matmul over every inner node
        d_u_f = d_f.t() @ h_kids  # [D, D], over every child slot
        return dh_all[:n0], dc_all[:n0], d_wx, d_u_iou, d_u_f, None, None


class ChildSumTreeLSTM(nn.Module):
    """Child-Sum Tree-LSTM; logits for every node."""

    def __init__(self, config: ChildSumConfig, vocab_size: int, vectors: np.ndarray | None = None):
        super().__init__()
        self.config = config
        d = config.hidden_dim
        self.embed = word_embedding(vocab_size, config.embed_dim, vectors)
        self.embed.sparse = config.sparse_embedding
        # Input weights of all four gates in one Linear: x -> [i; o; u; f] (the biases live here).
        # Tai et al.'s code also gives the U side of each gate a bias: the same model, but there
        # each bias starts as the sum of two uniform draws, here as one (+-1/sqrt(E)).
        self.input = nn.Linear(config.embed_dim, 4 * d)
        self.hidden_iou = nn.Linear(d, 3 * d, bias=False)  # U_i, U_o, U_u on h~
        self.hidden_f = nn.Linear(d, d, bias=False)  # U_f on each child's h_k
        self.dropout = Dropout(config.dropout)
        self.classify = nn.Linear(d, config.num_classes)

    def forward(self, batch: TreeBatch) -> Output:
        d = self.config.hidden_dim
        plan = LevelOrder.of(batch)
        # One matmul gives every node's input part, computed once per distinct word of the
        # batch: a node's input depends on its word alone, and on constituency trees every
        # inner node reads the same padding word (so theirs is just the bias).
        distinct, index = torch.unique(batch.words, return_inverse=True)  # [U], [N]
        wx = self.input(self.embed(distinct)).index_select(0, index.index_select(0, plan.order))
        wx_leaf, wx_inner = wx.split([plan.sizes[0], len(wx) - plan.sizes[0]])  # [L0, 4D], [M, 4D]
        # A leaf has no children: h~ = 0 and no forget terms, so c = i*u and h = o*tanh(c).
        i, o, u = wx_leaf[:, : 3 * d].chunk(3, 1)  # [L0, D] each
        leaf_c = torch.sigmoid(i) * torch.tanh(u)  # [L0, D]
        leaf_h = torch.sigmoid(o) * torch.tanh(leaf_c)  # [L0, D]
        u_iou, u_f = self.hidden_iou.weight, self.hidden_f.weight
        slots = ChildSlots.of(batch, plan)
        h = run_forest(_Forest, [leaf_h, leaf_c, wx_inner], u_f.dtype, u_iou, u_f, plan, slots)
        logits = self.classify(self.dropout(h)).index_select(0, plan.position)  # [N, C]
        return Output(logits, node_loss(logits, batch.targets))
