"""Naive recursive references for the tree models: one node at a time, as the original code ran.

Each function walks every tree of a batch recursively in Python and computes each node's state
from the paper's equations, written out again here with the batched model's own parameters.
Tests compare the level-batched ``forward`` against them (logits, loss, gradients); the
benchmark times both with the same weights. They are slow on purpose and never used to train.

Shape letters: E word vector size, D hidden size, C classes; every state is a [D] vector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from treeqa.data.batching import TreeBatch
from treeqa.models.childsum import ChildSumTreeLSTM
from treeqa.models.common import Output, node_loss
from treeqa.models.tree_gru import TreeGRU
from treeqa.models.tree_lstm import TreeLSTM

State = tuple[torch.Tensor, ...]


def _word(model: nn.Module, batch: TreeBatch, u: int) -> torch.Tensor:
    """[E] the word vector of node u (the zero padding row at constituency inner nodes)."""
    embed = model.embed
    assert isinstance(embed, nn.Embedding)
    return embed(batch.words[u : u + 1])[0]


def _tree_lstm_node(model: TreeLSTM, batch: TreeBatch, u: int, kids: list[State]) -> State:
    d = model.config.hidden_dim
    if not kids:
        g = model.leaf.weight @ _word(model, batch, u) + model.leaf.bias  # [2D]
        c = g[:d]
        return torch.sigmoid(g[d:]) * torch.tanh(c), c
    zero = kids[0][0].new_zeros(d)
    (h_l, c_l), (h_r, c_r) = (kids + [(zero, zero)])[:2]  # a single child: right state is 0
    g = model.compose.weight @ torch.cat([h_l, h_r]) + model.compose.bias  # [5D]
    i, f_l, f_r, o, u_ = g.split(d)
    c = torch.sigmoid(i) * torch.tanh(u_) + torch.sigmoid(f_l) * c_l + torch.sigmoid(f_r) * c_r
    return torch.sigmoid(o) * torch.tanh(c), c


def _childsum_node(model: ChildSumTreeLSTM, batch: TreeBatch, u: int, kids: list[State]) -> State:
    d = model.config.hidden_dim
    x = _word(model, batch, u)  # [E]
    w, b = model.input.weight, model.input.bias
    g = w[: 3 * d] @ x + b[: 3 * d]  # [3D]
    c = x.new_zeros(d)
    if kids:
        g = g + model.hidden_iou.weight @ sum((h for h, _ in kids), x.new_zeros(d))
        for h_k, c_k in kids:
            f = torch.sigmoid(w[3 * d :] @ x + b[3 * d :] + model.hidden_f.weight @ h_k)
            c = c + f * c_k
    i, o, u_ = g.split(d)
    c = torch.sigmoid(i) * torch.tanh(u_) + c
    return torch.sigmoid(o) * torch.tanh(c), c


def _gru(
    wx: torch.Tensor, w_h: torch.Tensor, b_h: torch.Tensor, h: torch.Tensor, cell: str
) -> torch.Tensor:
    """One GRU step written out: wx [3D] = W x + b, U = w_h [3D, D], b_h [3D], h [D]."""
    d = h.shape[0]
    gh = w_h @ h + b_h
    r = torch.sigmoid(wx[:d] + gh[:d])
    z = torch.sigmoid(wx[d : 2 * d] + gh[d : 2 * d])
    cand = torch.tanh(wx[2 * d :] + r * gh[2 * d :])
    return r * h + (1 - z) * cand if cell == "seed" else (1 - z) * cand + z * h


def _tree_gru_node(model: TreeGRU, batch: TreeBatch, u: int, kids: list[State]) -> State:
    cfg, d = model.config, model.config.hidden_dim
    own = [_word(model, batch, u)]
    if model.tag_vectors is not None:
        own.append(model.tag_vectors(batch.tags[u : u + 1])[0])  # type: ignore[index]
    if not kids:
        wx = model.leaf_in.weight @ torch.cat(own) + model.leaf_in.bias  # [3D]
        zero = wx.new_zeros(d)
        return (_gru(wx, zero.new_zeros(3 * d, d), model.leaf_hidden_bias, zero, cfg.cell),)
    h = own[0].new_zeros(d)
    for v, (k_v,) in zip(batch.children(u), kids, strict=True):
        parts = [*own, k_v]
        if model.rel_vectors is not None:
            parts.append(model.rel_vectors(batch.rels[v : v + 1])[0])  # type: ignore[index]
        x = torch.cat(parts)  # [w_u; t_u; k_v; r_v], the column order of node_in
        g = model.node_in.weight @ x + model.node_in.bias  # [3D + A]
        m = _gru(g[: 3 * d], model.node_hidden.weight, model.node_hidden.bias, h, cfg.cell)
        if model.attention is not None:
            a = torch.sigmoid(
                model.attention.weight @ torch.tanh(g[3 * d :]) + model.attention.bias
            )
            m = a * m + (1 - a) * h
        h = m
    return (h,)


def reference_forward(model: nn.Module, batch: TreeBatch) -> Output:
    """The model's ``forward(batch)``, computed by recursion, one node at a time."""
    node: Callable[[Any, TreeBatch, int, list[State]], State]
    if isinstance(model, TreeLSTM):
        node = _tree_lstm_node
    elif isinstance(model, ChildSumTreeLSTM):
        node = _childsum_node
    elif isinstance(model, TreeGRU):
        node = _tree_gru_node
    else:
        raise TypeError(f"no recursive reference for {type(model).__name__}")
    module: Any = model  # each node function takes its own model class
    children = [batch.children(u) for u in range(batch.words.shape[0])]
    hidden: dict[int, torch.Tensor] = {}

    def visit(u: int) -> State:
        state = node(module, batch, u, [visit(v) for v in children[u]])
        hidden[u] = state[0]
        return state

    for root in batch.roots.tolist():
        visit(root)
    h = torch.stack([hidden[u] for u in range(len(children))])  # [N, D]
    classify = model.classify
    dropout = model.dropout
    assert isinstance(classify, nn.Module) and isinstance(dropout, nn.Module)
    logits = classify(dropout(h))  # [N, C]
    return Output(logits, node_loss(logits, batch.targets))
