"""The Tree-GRU of the original sentiment report, level-batched and without its bugs.

Leaf: ``k = GRU([w; t], 0)``. Inner node u: start ``h = 0``; for each child v in order,
``x = [w_u; k_v; r_v; t_u]``, ``m = GRU(x, h)``; with the attention gate
``a = sigmoid(W_a tanh(W_b x))``, ``h = a*m + (1-a)*h``, else ``h = m``; finally ``k_u = h``.
w: word vector (zero at constituency inner nodes), t: POS-tag vector, r: vector of the
relation of child v to u. Tags and relations come with dependency-parsed SST; on constituency
trees ``tag_dim = rel_dim = 0``.

Batched per level: the per-child loop becomes K steps over the i-th child of every node of the
level, and a node with fewer than i + 1 children keeps its state at step i. The report's bugs
are absent: every gate has its own weights (no ``self.Ur = self.Uz``) and states live in a
per-forward buffer, never on the trees.

Shape letters: N nodes in the forest, L nodes in one level, U distinct (word, tag) inputs
in the batch, K most children of a node, E word vector size, T tag vector size, R relation
vector size, A attention hidden size, D hidden size, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from treeqa.data.batching import TreeBatch
from treeqa.models.common import Dropout, Output, node_loss, word_embedding
from treeqa.models.tree_levels import LevelStates, child_slots, level_children

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
        tags = getattr(batch, "tags", None)  # [N] int64, only on dependency batches
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
        rels = getattr(batch, "rels", None)  # [N] int64 relation of each node to its parent
        if rels is None:
            raise ValueError("model.rel_dim > 0 but the batch has no relations; use rel_dim = 0")
        part = F.linear(self.rel_vectors(rels), w_rel)  # [N, 3D + A]
        return torch.cat([part, part.new_zeros(1, part.shape[1])])

    def forward(self, batch: TreeBatch) -> Output:
        cfg = self.config
        n, d = batch.words.shape[0], cfg.hidden_dim
        own, own_row = self.node_inputs(batch)  # [U, E + T], [N]
        # Column blocks of W (and W_b) for the per-node, per-child state and relation inputs.
        w = self.node_in.weight  # [3D + A, E + T + D + R]
        split = own.shape[1]
        w_own, w_state, w_rel = w[:, :split], w[:, split : split + d], w[:, split + d :]
        rel = self.relation_part(batch, w_rel)  # [N + 1, 3D + A] or None
        kids = child_slots(batch)  # [N, K]

        leaves = batch.levels[0]
        gx = self.leaf_in(own).index_select(0, own_row.index_select(0, leaves))  # [L0, 3D]
        base_own = F.linear(own, w_own, self.node_in.bias)  # [U, 3D + A]
        zero = gx.new_zeros(gx.shape[0], d)  # [L0, D]
        leaf = gru_update(gx, self.leaf_hidden_bias.expand_as(gx), zero, cfg.cell)
        states = LevelStates(n, d, leaf)
        states.write(leaves, leaf)

        for level, slots in zip(batch.levels[1:], level_children(batch, kids), strict=True):
            m, k = slots.shape
            base = base_own.index_select(0, own_row.index_select(0, level))  # [L, 3D + A]
            flat = slots.reshape(-1)  # [L*K]
            per_child = F.linear(states.read(flat), w_state)  # [L*K, 3D + A]
            if rel is not None:
                per_child = per_child + rel.index_select(0, flat)
            per_child = per_child.view(m, k, -1)  # [L, K, 3D + A]
            h = leaf.new_zeros(m, d)  # [L, D]
            for i in range(k):
                pre = base + per_child[:, i]  # [L, 3D + A]
                # h = 0 before the first child, so U h is just the bias there.
                gh = self.node_hidden(h) if i else self.node_hidden.bias.expand(m, 3 * d)
                new = gru_update(pre[:, : 3 * d], gh, h, cfg.cell)  # [L, D]
                if self.attention is not None:
                    a = torch.sigmoid(self.attention(torch.tanh(pre[:, 3 * d :])))  # [L, 1]
                    new = a * new + (1 - a) * h
                # Every inner node has a first child; later steps skip nodes without an i-th.
                h = new if i == 0 else torch.where(slots[:, i : i + 1] < n, new, h)
            states.write(level, h)
        k_all = states.read(torch.arange(n, device=own.device))  # [N, D]
        logits = self.classify(self.dropout(k_all))  # [N, C]
        return Output(logits, node_loss(logits, batch.targets))
