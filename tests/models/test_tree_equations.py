"""Each tree model on a tiny forest against its equations written out by hand, gate by gate.

The batched models are tested against the recursive reference (``test_tree_models.py``); a
mistake made in both would pass there. Here every node's state is computed from Tai, Socher &
Manning (2015) and from the Tree-GRU report's equations, with the model's weights cut into
the per-gate blocks the equations name, and both the model and the reference are held to it.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.functional import cross_entropy

from treeqa.data.batching import TreeBatch, collate, encode
from treeqa.data.dependency import from_record
from treeqa.data.tree import parse_tree
from treeqa.data.vocab import Vocab
from treeqa.models.childsum import ChildSumConfig, ChildSumTreeLSTM
from treeqa.models.reference import reference_forward
from treeqa.models.tree_gru import TreeGRU, TreeGRUConfig
from treeqa.models.tree_lstm import TreeLSTM, TreeLSTMConfig

E, D = 3, 2  # word vector and state sizes
sigmoid, tanh = torch.sigmoid, torch.tanh
State = tuple[torch.Tensor, torch.Tensor]  # h, c


def sharpen(model: torch.nn.Module) -> torch.nn.Module:
    """float64, eval mode, weights far from the default init (every gate away from 0.5)."""
    torch.manual_seed(0)
    model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model


def assert_model_and_reference_give(
    model: torch.nn.Module, batch: TreeBatch, h: list[torch.Tensor]
) -> None:
    """Both forwards give the classifier's logits of the hand states ``h`` (node order) and
    the mean cross-entropy over the labelled nodes."""
    classify = model.classify
    assert isinstance(classify, torch.nn.Linear)
    logits = torch.stack([classify.weight @ h_u + classify.bias for h_u in h])  # [N, C]
    labelled = batch.targets >= 0
    loss = cross_entropy(logits[labelled], batch.targets[labelled])
    for run in (model, lambda b: reference_forward(model, b)):
        out = run(batch)
        torch.testing.assert_close(out.logits, logits, atol=1e-12, rtol=0)
        torch.testing.assert_close(out.loss, loss, atol=1e-12, rtol=0)


def test_binary_tree_lstm_follows_the_n_ary_equations() -> None:
    tree = parse_tree("(3 (1 bad) (4 (2 not) (0 good)))")  # pre-order: 0 root, 1 bad, 2, 3, 4
    vocab = Vocab.build(tree.leaves)
    model = sharpen(TreeLSTM(TreeLSTMConfig(embed_dim=E, hidden_dim=D), len(vocab)))
    batch = collate([encode(tree, vocab, "fine")])
    x = {w: model.embed.weight[vocab.id(w)] for w in tree.leaves}

    def leaf(w: str) -> State:
        # Tai et al.'s leaf module: c = W_c x + b_c, h = sigmoid(W_o x + b_o) * tanh(c)
        (w_c, w_o), (b_c, b_o) = model.leaf.weight.split(D), model.leaf.bias.split(D)
        c = w_c @ x[w] + b_c
        return sigmoid(w_o @ x[w] + b_o) * tanh(c), c

    def node(left: State, right: State) -> State:
        # Gate g of the node reads both children: U_g^l h_l + U_g^r h_r + b_g (the U_kl terms).
        (h_l, c_l), (h_r, c_r) = left, right
        rows = model.compose.weight.split(D)  # [i; f_l; f_r; o; u] blocks of [D, 2D]
        bias = model.compose.bias.split(D)
        pre = [u[:, :D] @ h_l + u[:, D:] @ h_r + b for u, b in zip(rows, bias, strict=True)]
        i, f_l, f_r, o = (sigmoid(p) for p in pre[:4])
        u = tanh(pre[4])
        c = i * u + f_l * c_l + f_r * c_r
        return o * tanh(c), c

    bad, not_, good = leaf("bad"), leaf("not"), leaf("good")
    not_good = node(not_, good)
    root = node(bad, not_good)
    assert_model_and_reference_give(model, batch, [root[0], bad[0], not_good[0], not_[0], good[0]])


def test_child_sum_tree_lstm_follows_its_equations_with_a_forget_gate_per_child() -> None:
    # "film" heads "a" and "good" (sentence order: a good film); "good" heads "very".
    record = {
        "tokens": ["a", "very", "good", "film"],
        "tags": ["DT", "RB", "JJ", "NN"],
        "heads": [3, 2, 3, -1],
        "rels": ["det", "advmod", "amod", "ROOT"],
        "labels": [2, 3, 4, 4],
    }
    tree = from_record(record)  # pre-order: film, a, good, very
    vocab = Vocab.build(tree.words)
    model = sharpen(ChildSumTreeLSTM(ChildSumConfig(embed_dim=E, hidden_dim=D), len(vocab)))
    batch = collate([encode(tree, vocab, "fine")])
    w_i, w_o, w_u, w_f = model.input.weight.split(D)
    b_i, b_o, b_u, b_f = model.input.bias.split(D)
    u_i, u_o, u_u = model.hidden_iou.weight.split(D)
    u_f = model.hidden_f.weight

    def node(word: str, kids: list[State]) -> State:
        x = model.embed.weight[vocab.id(word)]
        h_sum = sum((h_k for h_k, _ in kids), torch.zeros(D, dtype=x.dtype))
        i = sigmoid(w_i @ x + u_i @ h_sum + b_i)
        o = sigmoid(w_o @ x + u_o @ h_sum + b_o)
        u = tanh(w_u @ x + u_u @ h_sum + b_u)
        # f_jk = sigmoid(W_f x_j + U_f h_k + b_f): each child's own gate on its own memory.
        c = i * u + sum((sigmoid(w_f @ x + u_f @ h_k + b_f) * c_k for h_k, c_k in kids), 0 * u)
        return o * tanh(c), c

    very = node("very", [])
    a, good = node("a", []), node("good", [very])
    film = node("film", [a, good])
    assert_model_and_reference_give(model, batch, [film[0], a[0], good[0], very[0]])


@pytest.mark.parametrize("cell", ["gru", "seed"])
@pytest.mark.parametrize("attention_dim", [0, 3])
def test_tree_gru_follows_the_report_children_in_sentence_order(
    cell: str, attention_dim: int
) -> None:
    # Two trees whose roots share a level: "film" has two children, "fine" one, so the second
    # child step runs on "film" alone. Tags and relations as on dependency SST.
    records = [
        {
            "tokens": ["dull", "film", "indeed"],
            "tags": ["JJ", "NN", "RB"],
            "heads": [1, -1, 1],
            "rels": ["amod", "ROOT", "advmod"],
            "labels": [1, 1, 2],
        },
        {
            "tokens": ["fine", "acting"],
            "tags": ["JJ", "NN"],
            "heads": [-1, 0],
            "rels": ["ROOT", "nsubj"],
            "labels": [3, -1],
        },
    ]
    trees = [from_record(r) for r in records]  # pre-order: film, dull, indeed | fine, acting
    vocab = Vocab.build(w for t in trees for w in t.words)
    tags, rels = Vocab.build(["JJ", "NN", "RB"]), Vocab.build(["ROOT", "amod", "advmod", "nsubj"])
    t_dim, r_dim = 2, 2
    config = TreeGRUConfig(
        embed_dim=E,
        hidden_dim=D,
        cell=cell,
        tag_dim=t_dim,
        rel_dim=r_dim,
        attention_dim=attention_dim,
        num_tags=len(tags),
        num_rels=len(rels),
    )
    model = sharpen(TreeGRU(config, len(vocab)))
    batch = collate([encode(t, vocab, "fine", tags, rels) for t in trees])
    assert model.tag_vectors is not None and model.rel_vectors is not None
    tag_table, rel_table = model.tag_vectors.weight, model.rel_vectors.weight

    def word(w: str) -> torch.Tensor:
        return model.embed.weight[vocab.id(w)]

    def tag(t: str) -> torch.Tensor:
        return tag_table[tags.id(t)]

    def gru(gx: torch.Tensor, u: torch.Tensor, b_h: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """gx = W x + b [3D]: r, z, then the candidate's rows, as torch.nn.GRUCell."""
        gh = u @ h + b_h
        r = sigmoid(gx[:D] + gh[:D])
        z = sigmoid(gx[D : 2 * D] + gh[D : 2 * D])
        cand = tanh(gx[2 * D :] + r * gh[2 * D :])
        if cell == "seed":  # the report's update
            return r * h + (1 - z) * cand
        return (1 - z) * cand + z * h

    def leaf(w: str, t: str) -> torch.Tensor:
        # k = GRU([w; t], h0 = 0)
        gx = model.leaf_in.weight @ torch.cat([word(w), tag(t)]) + model.leaf_in.bias
        u_zero = torch.zeros(3 * D, D, dtype=gx.dtype)
        return gru(gx, u_zero, model.leaf_hidden_bias, torch.zeros(D, dtype=gx.dtype))

    def inner(w: str, t: str, kids: list[tuple[torch.Tensor, str]]) -> torch.Tensor:
        h = torch.zeros(D, dtype=torch.float64)
        for k_v, rel in kids:  # in sentence order
            # x = [w_u; k_v; r_v; t_u], its columns laid out in node_in as [w_u; t_u; k_v; r_v]
            x = torch.cat([word(w), tag(t), k_v, rel_table[rels.id(rel)]])
            g = model.node_in.weight @ x + model.node_in.bias  # [3D + A]
            m = gru(g[: 3 * D], model.node_hidden.weight, model.node_hidden.bias, h)
            if model.attention is not None:  # a = sigmoid(W_a tanh(W_b x))
                a = sigmoid(model.attention.weight @ tanh(g[3 * D :]) + model.attention.bias)
                m = a * m + (1 - a) * h
            h = m
        return h

    dull, indeed, acting = leaf("dull", "JJ"), leaf("indeed", "RB"), leaf("acting", "NN")
    film = inner("film", "NN", [(dull, "amod"), (indeed, "advmod")])
    fine = inner("fine", "JJ", [(acting, "nsubj")])
    assert_model_and_reference_give(model, batch, [film, dull, indeed, fine, acting])
    # The order of the children is part of the model: taken the other way, "film" differs.
    flipped = inner("film", "NN", [(indeed, "advmod"), (dull, "amod")])
    assert (flipped - film).abs().max() > 1e-3
