"""The Tree-GRU of the original sentiment report, level-batched and without its bugs.

Leaf: ``k = GRU([w; t], 0)``. Inner node u: start ``h = 0``; for each child v in order,
``x = [w_u; k_v; r_v; t_u]``, ``m = GRU(x, h)``; with the attention gate
``a = sigmoid(W_a tanh(W_b x))``, ``h = a*m + (1-a)*h``, else ``h = m``; finally ``k_u = h``.
w: word vector (zero at constituency inner nodes), t: POS-tag vector, r: vector of the
relation of child v to u. Tags and relations come with dependency-parsed SST; on constituency
trees ``tag_dim = rel_dim = 0``.

Batched per level: the per-child loop becomes steps over the i-th child of every node of the
level, as many as the level's widest node has children (``TreeBatch.level_arity``; on
dependency trees a batch's widest node is ~4x the typical one), and a node with fewer than
i + 1 children keeps its state at step i. The inner levels
run inside one autograd function (``_Forest``) with the backward written out, as in
``tree_lstm.py``; tests check it against the recursive reference and finite differences. The
report's bugs are absent: every gate has its own weights (no ``self.Ur = self.Uz``) and states
live in a per-forward buffer, never on the trees.

Shape letters: N nodes in the forest, M inner nodes, L nodes in one level, U distinct (word,
tag) inputs in the batch, K most children of a node, E word vector size, T tag vector size,
R relation vector size, A attention hidden size, D hidden size, G = 3D + A, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import FunctionCtx, once_differentiable

from treeqa.data.batching import TreeBatch
from treeqa.models.common import Dropout, Output, node_loss, word_embedding
from treeqa.models.tree_levels import LevelOrder, run_forest

CELLS = ("gru", "seed")


@dataclass(frozen=True)
class TreeGRUConfig:
    name: str = "tree_gru"
    embed_dim: int = 300
    """Word vector size (set from the vectors file when one is given)."""
    hidden_dim: int = 150
    """State size D of every node."""
    dropout: float = 0.5
    """Dropout on node states, before the classifier."""
    num_classes: int = 5
    """5 for fine-grained, 2 for binary, 3 for binary3; set from the task."""
    sparse_embedding: bool = True
    """Sparse word-vector gradients: a step touches only its batch's rows, not the whole
    table (Adagrad takes them; set false for Adam)."""
    cell: str = "gru"
    """gru: h' = (1-z)*h~ + z*h | seed: the report's update h' = r*h + (1-z)*h~"""
    tag_dim: int = 0
    """POS-tag vector size; 0 = no tags (constituency trees have none)."""
    rel_dim: int = 0
    """Dependency-relation vector size; 0 = no relations (constituency trees have none)."""
    attention_dim: int = 0
    """Hidden size of the attention gate over children; 0 = no gate (h = m)."""
    num_tags: int = 0
    """Size of the POS-tag vocabulary (needed when tag_dim > 0)."""
    num_rels: int = 0
    """Size of the relation vocabulary (needed when rel_dim > 0)."""


def gru_update(gx: torch.Tensor, gh: torch.Tensor, h: torch.Tensor, cell: str) -> torch.Tensor:
    """One GRU step from its two halves: gx [L, 3D] = W x + b, gh [L, 3D] = U h + b_h, h [L, D].

    Gates r, z and candidate ``h~ = tanh(W_n x + r*(U_n h))`` as in ``torch.nn.GRUCell``;
    ``cell`` picks the update.
    """
    d = h.shape[1]
    rz = torch.sigmoid(gx[:, : 2 * d] + gh[:, : 2 * d])  # [L, 2D]
    r, z = rz[:, :d], rz[:, d:]
    cand = torch.tanh(gx[:, 2 * d :] + r * gh[:, 2 * d :])  # [L, D]
    if cell == "seed":
        return r * h + (1 - z) * cand
    return (1 - z) * cand + z * h


class _Forest(torch.autograd.Function):
    """Leaf states -> the state of every node in level order, with the backward written out.

    Computed outside, by autograd: ``base`` [M, G] = W_own [w_u; t_u] + b for each inner node,
    and ``rel`` [M, K, G] = W_rel r_v for each child slot (or None); G = 3D + A. For each level
    and child step i: ``pre = base + W_state k_v + rel``, a GRU step against ``gh = U h + b_h``,
    the attention gate, and a node with no i-th child keeps its state. One matmul per level
    gives W_state k_v for all K children, and the weight gradients are one matmul each over
    every child slot of the forest ([M, K, ...] buffers, node-major).
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        leaf: torch.Tensor,  # [L0, D]
        base: torch.Tensor,  # [M, G]
        rel: torch.Tensor | None,  # [M, K, G]
        w_state: torch.Tensor,  # [G, D]
        w_hidden: torch.Tensor,  # [3D, D]
        b_hidden: torch.Tensor,  # [3D]
        w_att: torch.Tensor | None,  # [1, A]
        b_att: torch.Tensor | None,  # [1]
        plan: LevelOrder,
        cell: str,
    ) -> torch.Tensor:
        d, (m, k), g = leaf.shape[1], plan.kids.shape, w_state.shape[0]
        n = m + plan.sizes[0]
        h_all = torch.cat([leaf, leaf.new_zeros(m + 1, d)])  # [N + 1, D]
        # Slots past a level's widest node are never written: zero, so that the forest-wide
        # weight-gradient matmuls read zeros there.
        child = leaf.new_zeros(m, k, d)  # [M, K, D] the child state each step reads
        before = leaf.new_zeros(m, k, d)  # [M, K, D] the node's state before each step
        att = leaf.new_zeros(m, k, g - 3 * d)  # [M, K, A] tanh of the attention input
        extra = [rel] if rel is not None else []
        steps = []  # per level and step, bottom up: what the backward needs
        levels = plan.levels([base, child, before, att, *extra], [h_all])
        for width, (kids, base_k, child_k, before_k, att_k, *rel_k, h_k) in zip(
            plan.arity, levels, strict=True
        ):  # [L, K], [L, G], [L, K, D], [L, K, D], [L, K, A], ([L, K, G]), [L, D]
            kids = kids[:, :width]  # [L, W]: steps past the level's widest node would be no-ops
            slots = h_all.index_select(0, kids.reshape(-1))  # [L*W, D]
            child_k[:, :width] = slots.view(-1, width, d)
            pre_k = (slots @ w_state.t()).view(-1, width, g) + base_k.unsqueeze(1)
            if rel_k:
                pre_k = pre_k + rel_k[0][:, :width]  # [L, W, G]
            h = leaf.new_zeros(kids.shape[0], d)  # [L, D], before the first child
            for i, pre in enumerate(pre_k.unbind(1)):  # [L, G]
                if i:
                    before_k[:, i] = h
                gh = torch.addmm(b_hidden, h, w_hidden.t()) if i else b_hidden.expand(len(h), -1)
                x_rz, x_n, x_att = pre.split([2 * d, d, g - 3 * d], 1)
                gh_rz, gh_n = gh.split([2 * d, d], 1)  # [L, 2D], [L, D]
                rz = torch.sigmoid(x_rz + gh_rz)  # [L, 2D]
                r, z = rz.chunk(2, 1)
                cand = torch.tanh(x_n + r * gh_n)  # [L, D]
                # seed: r*h + (1-z)*cand; gru: (1-z)*cand + z*h
                gru = r * h + (1 - z) * cand if cell == "seed" else torch.lerp(cand, h, z)
                new, gate = gru, None
                if w_att is not None and b_att is not None:
                    t = torch.tanh(x_att, out=att_k[:, i])  # [L, A]
                    gate = torch.sigmoid(torch.addmm(b_att, t, w_att.t()))  # [L, 1]
                    new = torch.lerp(h, gru, gate)  # gate*gru + (1-gate)*h
                no_child = kids[:, i : i + 1] == n if i else None  # [L, 1]
                steps.append((rz, cand, gh_n, gru, gate, no_child))
                h = new if no_child is None else torch.where(no_child, h, new)
            h_k.copy_(h)
        ctx.save_for_backward(w_state, w_hidden, child, before, att)
        ctx.w_att, ctx.has_rel = w_att, rel is not None  # type: ignore[attr-defined]
        ctx.steps, ctx.plan, ctx.cell = steps, plan, cell  # type: ignore[attr-defined]
        return h_all[:-1]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        w_state, w_hidden, child, before, att = ctx.saved_tensors
        w_att: torch.Tensor | None = ctx.w_att
        plan: LevelOrder = ctx.plan
        d, (m, k), g = grad.shape[1], plan.kids.shape, w_state.shape[0]
        dh_all = torch.cat([grad, grad.new_zeros(1, d)])  # [N + 1, D]
        # Zero past each level's widest node (no step there), as in the forward's buffers.
        d_pre = grad.new_zeros(m, k, g)  # [M, K, G]
        d_gh = grad.new_zeros(m, k, 3 * d)  # [M, K, 3D]
        d_logit = grad.new_zeros(m, k, 1)  # [M, K, 1] attention gate, before its sigmoid
        steps = iter(reversed(ctx.steps))
        levels = plan.levels([d_pre, d_gh, d_logit, before, att], [dh_all])
        for width, (kids, d_pre_k, d_gh_k, d_logit_k, before_k, att_k, dh) in reversed(
            list(zip(plan.arity, levels, strict=True))
        ):
            for i in reversed(range(width)):  # dh: [L, D] gradient of the state after step i
                rz, cand, gh_n, gru, gate, no_child = next(steps)
                h = before_k[:, i]  # [L, D]
                d_new = dh if no_child is None else dh.masked_fill(no_child, 0)
                # kept state where the node has no i-th child
                d_h: torch.Tensor | float = 0 if no_child is None else dh.masked_fill(~no_child, 0)
                d_gru, d_att = d_new, []
                if gate is not None and w_att is not None:
                    d_gru = d_new * gate
                    d_gate = (d_new * (gru - h)).sum(1, keepdim=True)  # [L, 1]
                    d_logit_k[:, i] = d_gate * gate * (1 - gate)
                    t = att_k[:, i]  # [L, A]
                    d_att = [(d_logit_k[:, i] @ w_att) * (1 - t * t)]
                    d_h = d_h + d_new * (1 - gate)
                r, z = rz.chunk(2, 1)
                d_xn = d_gru * (1 - z) * (1 - cand * cand)  # [L, D] through tanh to x_n
                d_r = d_xn * gh_n  # [L, D]
                if ctx.cell == "seed":
                    d_z, d_r, d_h = -d_gru * cand, d_r + d_gru * h, d_h + d_gru * r
                else:
                    d_z, d_h = d_gru * (h - cand), d_h + d_gru * z
                d_rz = torch.cat([d_r, d_z], 1) * rz * (1 - rz)  # [L, 2D]
                d_pre_k[:, i] = torch.cat([d_rz, d_xn, *d_att], 1)
                d_gh_k[:, i] = torch.cat([d_rz, d_xn * r], 1)
                if i:  # the state before the first child is zero: nothing to pass back
                    dh = d_h + d_gh_k[:, i] @ w_hidden
            d_children = d_pre_k[:, :width].reshape(-1, g) @ w_state  # [L*W, D]
            dh_all.index_add_(0, kids[:, :width].reshape(-1), d_children)
        d_w_att = d_b_att = None
        if w_att is not None:
            d_w_att = d_logit.view(-1, 1).t() @ att.view(-1, att.shape[2])  # [1, A]
            d_b_att = d_logit.view(-1, 1).sum(0)  # [1]
        d_gh_flat = d_gh.view(-1, 3 * d)  # [M*K, 3D]
        return (
            dh_all[: plan.sizes[0]],
            d_pre.sum(1),  # [M, G]
            d_pre if ctx.has_rel else None,
            d_pre.view(-1, g).t() @ child.view(-1, d),  # [G, D]
            d_gh_flat.t() @ before.view(-1, d),  # [3D, D]
            d_gh_flat.sum(0),  # [3D]
            d_w_att,
            d_b_att,
            None,
            None,
        )


class TreeGRU(nn.Module):
    """Tree-GRU with optional tags, relations and attention gate; logits for every node."""

    def __init__(self, config: TreeGRUConfig, vocab_size: int, vectors: np.ndarray | None = None):
        super().__init__()
        if config.cell not in CELLS:
            raise ValueError(f"model.cell must be one of {', '.join(CELLS)}, got {config.cell!r}")
        if config.tag_dim > 0 and config.num_tags <= 0:
            raise ValueError("model.tag_dim > 0 needs model.num_tags (the tag vocabulary size)")
        if config.rel_dim > 0 and config.num_rels <= 0:
            raise ValueError(
                "model.rel_dim > 0 needs model.num_rels (the relation vocabulary size)"
            )
        self.config = config
        e, t, r, a, d = (
            config.embed_dim,
            config.tag_dim,
            config.rel_dim,
            config.attention_dim,
            config.hidden_dim,
        )
        self.embed = word_embedding(vocab_size, e, vectors)
        self.embed.sparse = config.sparse_embedding
        # Not named *embed so that optim.py gives them the model's lr, not the word-vector lr.
        self.tag_vectors = nn.Embedding(config.num_tags, t) if t else None
        self.rel_vectors = nn.Embedding(config.num_rels, r) if r else None
        # Leaf GRU with h0 = 0: U h0 vanishes, so only its hidden bias is a parameter.
        self.leaf_in = nn.Linear(e + t, 3 * d)
        self.leaf_hidden_bias = nn.Parameter(torch.zeros(3 * d))
        # Inner GRU input x = [w_u; t_u; k_v; r_v] (the report's [w_u; k_v; r_v; t_u],
        # reordered so the per-node part and the per-child part are contiguous column blocks).
        # One Linear gives the GRU's 3D input gates and the attention's A hidden units.
        self.node_in = nn.Linear(e + t + d + r, 3 * d + a)
        self.node_hidden = nn.Linear(d, 3 * d)
        self.attention = nn.Linear(a, 1) if a else None  # W_a
        self.dropout = Dropout(config.dropout)
        self.classify = nn.Linear(d, config.num_classes)

    def node_inputs(self, batch: TreeBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """[U, E + T] the distinct own inputs [w; t] among the batch's nodes, and [N] each
        node's row in them. An own input depends on the word (and tag) alone, so each distinct
        one is transformed once; on constituency trees every inner node reads the padding word."""
        tags = batch.tags  # [N] int64, only on dependency batches
        if self.tag_vectors is None:
            distinct, index = torch.unique(batch.words, return_inverse=True)  # [U], [N]
            return self.embed(distinct), index
        if tags is None:
            raise ValueError("model.tag_dim > 0 but the batch has no POS tags; use tag_dim = 0")
        pairs = batch.words * self.config.num_tags + tags  # [N] one key per (word, tag)
        distinct, index = torch.unique(pairs, return_inverse=True)  # [U], [N]
        words, tag_ids = distinct // self.config.num_tags, distinct % self.config.num_tags
        return torch.cat([self.embed(words), self.tag_vectors(tag_ids)], 1), index

    def relation_part(self, batch: TreeBatch, w_rel: torch.Tensor) -> torch.Tensor | None:
        """[N + 1, 3D + A] W r_v for every node as a child (row N, "no child", is zero)."""
        if self.rel_vectors is None:
            return None
        rels = batch.rels  # [N] int64 relation of each node to its parent
        if rels is None:
            raise ValueError("model.rel_dim > 0 but the batch has no relations; use rel_dim = 0")
        part = F.linear(self.rel_vectors(rels), w_rel)  # [N, 3D + A]
        return torch.cat([part, part.new_zeros(1, part.shape[1])])

    def forward(self, batch: TreeBatch) -> Output:
        cfg = self.config
        d = cfg.hidden_dim
        own, own_row = self.node_inputs(batch)  # [U, E + T], [N]
        # Column blocks of W (and W_b) for the per-node, per-child state and relation inputs.
        w = self.node_in.weight  # [3D + A, E + T + D + R]
        split = own.shape[1]
        w_own, w_state, w_rel = w[:, :split], w[:, split : split + d], w[:, split + d :]
        rel = self.relation_part(batch, w_rel)  # [N + 1, 3D + A] or None
        plan = LevelOrder.of(batch)

        gx = self.leaf_in(own).index_select(0, own_row.index_select(0, plan.leaves))  # [L0, 3D]
        zero = gx.new_zeros(gx.shape[0], d)  # [L0, D]
        leaf = gru_update(gx, self.leaf_hidden_bias.expand_as(gx), zero, cfg.cell)  # [L0, D]
        base_own = F.linear(own, w_own, self.node_in.bias)  # [U, 3D + A]
        base = base_own.index_select(0, own_row.index_select(0, plan.inner))  # [M, 3D + A]
        m, k = plan.child_ids.shape
        # [M, K, 3D + A] W r_v of each child slot (row N of rel, "no child", is zero)
        rel_slots = (
            None if rel is None else rel.index_select(0, plan.child_ids.view(-1)).view(m, k, -1)
        )
        att = self.attention
        k_all = run_forest(
            _Forest,
            [leaf, base, rel_slots],
            w_state.dtype,
            w_state,
            self.node_hidden.weight,
            self.node_hidden.bias,
            None if att is None else att.weight,
            None if att is None else att.bias,
            plan,
            cfg.cell,
        )  # [N, D] in level order
        logits = self.classify(self.dropout(k_all)).index_select(0, plan.position)  # [N, C]
        return Output(logits, node_loss(logits, batch.targets))
