"""The Tree-GRU of the original sentiment report, level-batched and without its bugs.

Leaf: ``k = GRU([w; t], 0)``. Inner node u: start ``h = 0``; for each child v in order,
``x = [w_u; k_v; r_v; t_u]``, ``m = GRU(x, h)``; with the attention gate
``a = sigmoid(W_a tanh(W_b x))``, ``h = a*m + (1-a)*h``, else ``h = m``; finally ``k_u = h``.
w: word vector (zero at constituency inner nodes), t: POS-tag vector, r: vector of the
relation of child v to u. Tags and relations come with dependency-parsed SST; on constituency
trees ``tag_dim = rel_dim = 0``.

Batched per level: the per-child loop becomes steps over the i-th child of every node of the
level. A level's nodes come most children first (``TreeBatch.level_steps``), so step i runs
on the prefix of nodes that have an i-th child and the rest keep their states: packed, like
``PackedSequence``, with no padded child slots and no masks (on dependency SST, padding each
level to its widest node would run 2.6x as many child steps at batch 25, 3.5x at batch 256).
The inner levels run inside one autograd function (``_Forest``) with the backward written
out, as in ``tree_lstm.py``; tests check it against the recursive reference and finite
differences. The report's bugs are absent: every gate has its own weights (no
``self.Ur = self.Uz``) and states live in a per-forward buffer, never on the trees.

Shape letters: N nodes in the forest, M inner nodes, L nodes in one level, n_i the nodes of a
level that have an i-th child, S child slots (one per non-root node), U distinct (word, tag)
inputs in the batch, E word vector size, T tag vector size, R relation vector size, A
attention hidden size, D hidden size, G = 3D + A, C classes.
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
from treeqa.models.tree_levels import ChildSlots, LevelOrder, run_forest

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
    """Size of the POS-tag vocabulary (needed when tag_dim > 0). Tag ids are not checked
    against it (that would read a value back from the device each step): the recipes build
    them from the same vocabulary, but in a batch built by hand a tag id >= num_tags reads
    another word's (word, tag) pair, silently (a relation id >= num_rels fails in its
    embedding)."""
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

    Computed outside, by autograd: ``fixed`` [S, G] = W_own [w_u; t_u] + b + W_rel r_v for
    each child slot (``ChildSlots``), G = 3D + A. For each level and child step i:
    ``pre = fixed + W_state k_v``, a GRU step against ``gh = U h + b_h``, the attention gate.
    Step i of a level updates the states of its first n_i nodes, those with an i-th child; the
    others keep theirs. One matmul per level gives W_state k_v for all of its slots, and the
    weight gradients are one matmul each over every slot of the forest.
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        leaf: torch.Tensor,  # [L0, D]
        fixed: torch.Tensor,  # [S, G]
        w_state: torch.Tensor,  # [G, D]
        w_hidden: torch.Tensor,  # [3D, D]
        b_hidden: torch.Tensor,  # [3D]
        w_att: torch.Tensor | None,  # [1, A]
        b_att: torch.Tensor | None,  # [1]
        plan: LevelOrder,
        slots: ChildSlots,
        cell: str,
    ) -> torch.Tensor:
        d, m, (s, g) = leaf.shape[1], plan.inner.shape[0], fixed.shape
        h_all = torch.cat([leaf, leaf.new_zeros(m + 1, d)])  # [N + 1, D]
        child = leaf.new_empty(s, d)  # [S, D] the child state each step reads
        before = leaf.new_zeros(s, d)  # [S, D] the node's state before each step (0 at the first)
        att = leaf.new_empty(s, g - 3 * d)  # [S, A] tanh of the attention input
        steps = []  # per level and step, bottom up: what the backward needs
        levels = slots.levels([fixed, child, before, att])
        h_levels = h_all[:-1].split(plan.sizes)[1:]
        for sizes, (where, _, fixed_k, child_k, before_k, att_k), h_k in zip(
            slots.steps, levels, h_levels, strict=True
        ):  # [S_l], [S_l, G], [S_l, D], [S_l, D], [S_l, A], [L, D]
            torch.index_select(h_all, 0, where, out=child_k)
            pre_k = torch.addmm(fixed_k, child_k, w_state.t())  # [S_l, G]
            h = h_k  # [L, D] the level's states, zero before the first child, updated in place
            parts = [t.split(sizes) for t in (pre_k, before_k, att_k)]
            for i, (pre, before_i, att_i) in enumerate(zip(*parts, strict=True)):  # n_i rows
                h_i = h[: pre.shape[0]]  # [n_i, D] the nodes with an i-th child
                if i:
                    before_i.copy_(h_i)
                    gh = torch.addmm(b_hidden, h_i, w_hidden.t())  # [n_i, 3D]
                else:
                    gh = b_hidden.expand(len(h_i), -1)
                x_rz, x_n, x_att = pre.split([2 * d, d, g - 3 * d], 1)
                gh_rz, gh_n = gh.split([2 * d, d], 1)  # [n_i, 2D], [n_i, D]
                rz = torch.sigmoid(x_rz + gh_rz)  # [n_i, 2D]
                r, z = rz.chunk(2, 1)
                cand = torch.tanh(x_n + r * gh_n)  # [n_i, D]
                # seed: r*h + (1-z)*cand; gru: (1-z)*cand + z*h
                gru = r * h_i + (1 - z) * cand if cell == "seed" else torch.lerp(cand, h_i, z)
                new, gate = gru, None
                if w_att is not None and b_att is not None:
                    t = torch.tanh(x_att, out=att_i)  # [n_i, A]
                    gate = torch.sigmoid(torch.addmm(b_att, t, w_att.t()))  # [n_i, 1]
                    new = torch.lerp(h_i, gru, gate)  # gate*gru + (1-gate)*h
                steps.append((rz, cand, gh_n, gru, gate))
                h_i.copy_(new)
        # Every input the backward reads is saved, so that one changed in place before the
        # backward is refused by autograd instead of giving wrong gradients: w_att, and b_hidden,
        # which the first step's gh_n in ``steps`` is a view of. (w_att is None without the gate:
        # torch saves None as None, though its stubs take tensors only.)
        saved = (w_state, w_hidden, b_hidden, w_att, child, before, att)
        ctx.save_for_backward(*saved)  # type: ignore[arg-type]
        ctx.steps = steps  # type: ignore[attr-defined]
        ctx.plan, ctx.slots, ctx.cell = plan, slots, cell  # type: ignore[attr-defined]
        return h_all[:-1]

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        w_state, w_hidden, _, w_att, child, before, att = ctx.saved_tensors
        plan: LevelOrder = ctx.plan
        slots: ChildSlots = ctx.slots
        d, (s, g) = grad.shape[1], (child.shape[0], w_state.shape[0])
        dh_all = torch.cat([grad, grad.new_zeros(1, d)])  # [N + 1, D]
        d_pre = grad.new_empty(s, g)  # [S, G]
        d_gh = grad.new_empty(s, 3 * d)  # [S, 3D]
        d_logit = grad.new_empty(s, 1)  # [S, 1] attention gate, before its sigmoid
        steps = iter(reversed(ctx.steps))
        levels = slots.levels([d_pre, d_gh, d_logit, before, att])
        dh_levels = dh_all[:-1].split(plan.sizes)[1:]
        for sizes, (where, _, d_pre_k, d_gh_k, d_logit_k, before_k, att_k), dh_k in reversed(
            list(zip(slots.steps, levels, dh_levels, strict=True))
        ):
            dh = dh_k  # [L, D] of the states after the level's last step; read by no other level
            parts = [t.split(sizes) for t in (d_pre_k, d_gh_k, d_logit_k, before_k, att_k)]
            for i, (d_pre_i, d_gh_i, d_logit_i, h, t) in reversed(
                list(enumerate(zip(*parts, strict=True)))
            ):
                rz, cand, gh_n, gru, gate = next(steps)
                d_new = dh[: len(h)]  # [n_i, D] of the state after step i; h: the one before
                d_gru, d_att, d_kept = d_new, [], None
                if gate is not None and w_att is not None:
                    d_gru = d_new * gate
                    d_gate = (d_new * (gru - h)).sum(1, keepdim=True)  # [n_i, 1]
                    torch.mul(d_gate, gate * (1 - gate), out=d_logit_i)
                    d_att = [(d_logit_i @ w_att) * (1 - t * t)]  # t: [n_i, A]
                    d_kept = d_new * (1 - gate)  # through the (1 - gate) * h term
                r, z = rz.chunk(2, 1)
                d_xn = d_gru * (1 - z) * (1 - cand * cand)  # [n_i, D] through tanh to x_n
                d_r = d_xn * gh_n  # [n_i, D]
                if ctx.cell == "seed":
                    d_z, d_r, d_h = -d_gru * cand, d_r + d_gru * h, d_gru * r
                else:
                    d_z, d_h = d_gru * (h - cand), d_gru * z
                if d_kept is not None:
                    d_h = d_h + d_kept
                d_rz = torch.cat([d_r, d_z], 1) * rz * (1 - rz)  # [n_i, 2D]
                torch.cat([d_rz, d_xn, *d_att], 1, out=d_pre_i)
                torch.cat([d_rz, d_xn * r], 1, out=d_gh_i)
                if i:  # the state before the first child is zero: nothing to pass back
                    d_new.copy_(torch.addmm(d_h, d_gh_i, w_hidden))
            dh_all.index_add_(0, where, d_pre_k @ w_state)  # [S_l, D] to the children
        d_w_att = d_b_att = None
        if w_att is not None:
            d_w_att = d_logit.t() @ att  # [1, A]
            d_b_att = d_logit.sum(0)  # [1]
        return (
            dh_all[: plan.sizes[0]],
            d_pre,  # [S, G]
            d_pre.t() @ child,  # [G, D]
            d_gh.t() @ before,  # [3D, D]
            d_gh.sum(0),  # [3D]
            d_w_att,
            d_b_att,
            None,
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

    def relation_vectors(self, batch: TreeBatch, slots: ChildSlots) -> torch.Tensor:
        """[S, R] the vector of each child slot's relation to its parent."""
        assert self.rel_vectors is not None
        rels = batch.rels  # [N] int64 relation of each node to its parent
        if rels is None:
            raise ValueError("model.rel_dim > 0 but the batch has no relations; use rel_dim = 0")
        return self.rel_vectors(rels.index_select(0, slots.child))

    def forward(self, batch: TreeBatch) -> Output:
        cfg = self.config
        d = cfg.hidden_dim
        own, own_row = self.node_inputs(batch)  # [U, E + T], [N]
        # Column blocks of W (and W_b) for the per-node, per-child state and relation inputs.
        w = self.node_in.weight  # [3D + A, E + T + D + R]
        split = own.shape[1]
        w_own, w_state, w_rel = w[:, :split], w[:, split : split + d], w[:, split + d :]
        plan = LevelOrder.of(batch)
        slots = ChildSlots.of(batch, plan)

        gx = self.leaf_in(own).index_select(0, own_row.index_select(0, plan.leaves))  # [L0, 3D]
        zero = gx.new_zeros(gx.shape[0], d)  # [L0, D]
        leaf = gru_update(gx, self.leaf_hidden_bias.expand_as(gx), zero, cfg.cell)  # [L0, D]
        base = F.linear(own, w_own, self.node_in.bias)  # [U, 3D + A]
        fixed = base.index_select(0, own_row.index_select(0, slots.parent))  # [S, 3D + A]
        if self.rel_vectors is not None:
            fixed = fixed + F.linear(self.relation_vectors(batch, slots), w_rel)
        att = self.attention
        k_all = run_forest(
            _Forest,
            [leaf, fixed],
            w_state.dtype,
            w_state,
            self.node_hidden.weight,
            self.node_hidden.bias,
            None if att is None else att.weight,
            None if att is None else att.bias,
            plan,
            slots,
            cfg.cell,
        )  # [N, D] in level order
        logits = self.classify(self.dropout(k_all)).index_select(0, plan.position)  # [N, C]
        return Output(logits, node_loss(logits, batch.targets))
