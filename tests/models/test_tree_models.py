"""Level-batched tree models against their naive recursive references, in float64."""

from __future__ import annotations

import copy
import dataclasses
import gc
import random
import sys
import weakref

import numpy as np
import pytest
import torch

from treeqa.data.batching import TreeBatch, collate, encode
from treeqa.data.dependency import from_record
from treeqa.data.tree import Tree, parse_tree
from treeqa.data.vocab import Vocab
from treeqa.models import SENTIMENT_MODELS, build_sentiment_model
from treeqa.models.childsum import ChildSumConfig, ChildSumTreeLSTM
from treeqa.models.reference import reference_forward
from treeqa.models.tree_gru import TreeGRU, TreeGRUConfig
from treeqa.models.tree_levels import ChildSlots, LevelOrder, fixed_children
from treeqa.models.tree_lstm import TreeLSTM, TreeLSTMConfig

TOL = 1e-5
# SST-format trees: PTB escapes, a U+00A0 inside a token, deep and shallow shapes.
SST_LINES = [
    "(3 (2 It) (4 (4 (2 's) (4 (3 (2 a) (4 (3 lovely) (2 film))) (3 (2 with) (4 (3 (3 lovely) (2 performances)) (2 (2 by) (2 (2 (2 Buy) (2 and)) (2 Accorsi))))))) (2 .)))",
    "(1 (2 (2 -LRB-) (2 unwatchable)) (1 (2 but) (1 (2 not) (3 good))))",
    "(2 yes)",
    "(0 (1 (2 A) (1 (2 caf\u00a0e) (1 (2 thriller) (1 (2 \\/) (1 boring))))) (2 -RRB-))",
    "(4 (3 (3 (2 not) (2 (2 a) (2 (2 bad) (2 movie)))) (2 ,)) (4 (2 truly) (4 great)))",
]


def random_tree(rng: np.random.Generator, max_kids: int, depth: int = 0) -> str:
    label = int(rng.integers(0, 5))
    if depth >= 6 or rng.random() < 0.3 + 0.08 * depth:
        return f"({label} w{int(rng.integers(0, 12))})"
    k = max_kids if max_kids == 2 else int(rng.integers(1, max_kids + 1))
    inside = " ".join(random_tree(rng, max_kids, depth + 1) for _ in range(k))
    return f"({label} {inside})"


def forest(lines: list[str], task: str = "fine") -> tuple[list[Tree], Vocab]:
    trees = [parse_tree(line) for line in lines]
    return trees, Vocab.build(w for t in trees for w in t.leaves)


def batch_of(trees: list[Tree], vocab: Vocab, task: str = "fine") -> TreeBatch:
    return collate([encode(t, vocab, task) for t in trees])


def random_forest(seed: int, max_kids: int, n: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    return [random_tree(rng, max_kids) for _ in range(n)]


def build(name: str, vocab: Vocab, **overrides: object) -> torch.nn.Module:
    config_cls, model_cls = SENTIMENT_MODELS[name]
    config = config_cls(embed_dim=6, hidden_dim=5, dropout=0.0, **overrides)
    torch.manual_seed(0)
    model = model_cls(config, len(vocab)).double()
    with torch.no_grad():  # larger weights than the default init make the test sharper
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


def dense(g: torch.Tensor | None) -> torch.Tensor | None:
    """Word-vector gradients are sparse; compare everything densely."""
    return g.to_dense() if g is not None and g.is_sparse else g


def assert_same_as_reference(model: torch.nn.Module, batch: TreeBatch) -> None:
    outputs, grads = [], []
    for run in (model, lambda b: reference_forward(model, b)):
        model.zero_grad(set_to_none=True)
        out = run(batch)
        assert out.loss is not None
        out.loss.backward()
        outputs.append(out)
        grads.append({k: dense(p.grad) for k, p in model.named_parameters() if p.requires_grad})
    (batched, ref), (g_batched, g_ref) = outputs, grads
    assert batched.logits.shape == (len(batch.words), model.config.num_classes)
    torch.testing.assert_close(batched.logits, ref.logits, atol=TOL, rtol=0)
    torch.testing.assert_close(batched.loss, ref.loss, atol=TOL, rtol=0)
    for name, g in g_batched.items():
        assert g is not None, f"{name} got no gradient"
        assert g.abs().sum() > 0, f"{name} got a zero gradient"
        torch.testing.assert_close(g, g_ref[name], atol=TOL, rtol=0, msg=name)


CASES = [
    ("tree_lstm", {}),
    ("childsum", {}),
    ("tree_gru", {"cell": "gru"}),
    ("tree_gru", {"cell": "seed", "attention_dim": 4}),
]


@pytest.mark.parametrize(("name", "overrides"), CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_batched_equals_recursive_reference_on_random_forests(
    name: str, overrides: dict[str, object], seed: int
) -> None:
    max_kids = 2 if name == "tree_lstm" else 4
    trees, vocab = forest(random_forest(seed, max_kids))
    if max_kids > 2:
        assert max(len(c) for t in trees for c in t.children) > 2  # really any fan-out
    assert_same_as_reference(build(name, vocab, **overrides), batch_of(trees, vocab))


@pytest.mark.parametrize(("name", "overrides"), CASES[1:])
def test_a_wide_node_costs_its_own_children_only(name: str, overrides: dict[str, object]) -> None:
    # A root with 300 leaf children beside ordinary trees: children are packed (E = N - B
    # entries), not a [N, widest] table, and the models still equal the reference.
    wide = "(3 " + " ".join(f"(2 w{i % 12})" for i in range(300)) + ")"
    trees, vocab = forest([wide, *random_forest(5, 3, n=3)])
    batch = batch_of(trees, vocab)
    n = len(batch.words)
    assert batch.child_index.shape == (n - len(trees),) and batch.child_start.shape == (n + 1,)
    assert batch.children(0) == list(range(1, 301))
    assert_same_as_reference(build(name, vocab, **overrides), batch)


@pytest.mark.parametrize(("name", "overrides"), CASES)
@pytest.mark.parametrize("task", ["fine", "binary"])
def test_batched_equals_recursive_reference_on_sst_trees(
    name: str, overrides: dict[str, object], task: str
) -> None:
    trees, vocab = forest(SST_LINES)
    model = build(name, vocab, num_classes=5 if task == "fine" else 2, **overrides)
    assert_same_as_reference(model, batch_of(trees, vocab, task))


def test_tree_gru_with_tags_relations_and_attention_equals_reference() -> None:
    trees, vocab = forest(random_forest(3, 3))
    base = batch_of(trees, vocab)
    n = len(base.words)
    g = torch.Generator().manual_seed(0)
    batch = dataclasses.replace(
        base,
        tags=torch.randint(0, 4, (n,), generator=g),
        rels=torch.randint(0, 3, (n,), generator=g),
    )
    model = build("tree_gru", vocab, tag_dim=3, num_tags=4, rel_dim=2, num_rels=3, attention_dim=4)
    assert_same_as_reference(model, batch)


def test_tags_or_relations_without_their_data_are_an_error() -> None:
    trees, vocab = forest(SST_LINES[:2])
    model = build("tree_gru", vocab, tag_dim=3, num_tags=4)
    with pytest.raises(ValueError, match="no POS tags"):
        model(batch_of(trees, vocab))
    model = build("tree_gru", vocab, rel_dim=3, num_rels=4)
    with pytest.raises(ValueError, match="no relations"):
        model(batch_of(trees, vocab))
    with pytest.raises(ValueError, match="num_tags"):
        TreeGRU(TreeGRUConfig(tag_dim=3), 10)
    with pytest.raises(ValueError, match="cell"):
        TreeGRU(TreeGRUConfig(cell="lstm"), 10)


def test_binary_tree_lstm_rejects_wider_trees() -> None:
    trees, vocab = forest(["(2 (2 a) (2 b) (2 c))"])
    with pytest.raises(ValueError, match="childsum"):
        build("tree_lstm", vocab)(batch_of(trees, vocab))


def test_a_tree_is_scored_the_same_alone_and_in_a_batch() -> None:
    trees, vocab = forest(SST_LINES)
    for model in (build("tree_lstm", vocab), build("childsum", vocab), build("tree_gru", vocab)):
        model.eval()
        together = model(batch_of(trees, vocab)).logits
        alone = torch.cat([model(batch_of([t], vocab)).logits for t in trees])
        torch.testing.assert_close(together, alone, atol=1e-10, rtol=0)


def test_dropout_before_the_classifier_only_in_training() -> None:
    trees, vocab = forest(SST_LINES)
    model = TreeLSTM(TreeLSTMConfig(embed_dim=6, hidden_dim=5, dropout=0.5), len(vocab))
    batch = batch_of(trees, vocab)
    model.train()
    assert not torch.equal(model(batch).logits, model(batch).logits)
    model.eval()
    assert torch.equal(model(batch).logits, model(batch).logits)


def test_configs_carry_the_recipe_fields_and_paper_sizes() -> None:
    for cls in (TreeLSTMConfig, ChildSumConfig, TreeGRUConfig):
        config = cls()
        assert (config.embed_dim, config.hidden_dim, config.dropout, config.num_classes) == (
            300,
            150,
            0.5,
            5,
        )
        assert dataclasses.is_dataclass(config)
        with pytest.raises(dataclasses.FrozenInstanceError):
            config.name = "x"  # type: ignore[misc]
    assert ChildSumTreeLSTM(ChildSumConfig(embed_dim=4, hidden_dim=3), 5).embed.weight.shape == (
        5,
        4,
    )


def test_report_command_line_resolves_to_the_tree_gru_config() -> None:
    from treeqa.recipes.sentiment import resolve_config

    argv = "--model tree_gru --emblr 0 --rel_dim 0 --tag_dim 0 --optim adagrad --name basic --lr 0.05 --wd 1e-4 --at_hid_dim 0"
    from treeqa.config import parse_overrides

    config = resolve_config({}, parse_overrides(argv.split()))
    assert config.name == "basic"
    assert isinstance(config.model, TreeGRUConfig)
    assert (config.model.rel_dim, config.model.tag_dim, config.model.attention_dim) == (0, 0, 0)
    assert (
        config.train.emb_lr,
        config.train.optim,
        config.train.lr,
        config.train.weight_decay,
    ) == (
        0.0,
        "adagrad",
        0.05,
        1e-4,
    )


@pytest.mark.parametrize("name", ["tree_lstm", "childsum", "tree_gru"])
def test_a_steps_graph_is_freed_by_reference_counting(name: str) -> None:
    # Regression (an earlier state store): a reference cycle through autograd kept every step's
    # graph, and the buffers it held, alive until the garbage collector ran.
    trees, vocab = forest(SST_LINES)
    model = build(name, vocab)
    out = model(batch_of(trees, vocab))
    assert out.loss is not None
    node, todo = None, [out.logits.grad_fn]
    while todo and node is None:  # find the forest's node; it is its own ctx
        fn = todo.pop()
        node = fn if type(fn).__name__ == "_ForestBackward" else None
        todo += [f for f, _ in fn.next_functions if f is not None]
    assert node is not None
    plan = weakref.ref(node.plan)  # kept on the ctx, as are the steps' saved values
    out.loss.backward()
    gc.disable()
    try:
        del out, node, fn, todo
        assert plan() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("name", ["tree_lstm", "tree_gru", "childsum"])
def test_backward_twice_through_a_retained_graph(name: str) -> None:
    # The written-out backwards and the Child-Sum's state store (with its own gradient
    # buffer) must all start clean on a second backward.
    trees, vocab = forest(SST_LINES)
    model = build(name, vocab)
    loss = model(batch_of(trees, vocab)).loss
    assert loss is not None
    loss.backward(retain_graph=True)
    once = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    loss.backward()
    for k, p in model.named_parameters():
        torch.testing.assert_close(dense(p.grad), 2 * dense(once[k]), msg=k)


def test_tree_lstm_unary_nodes_and_leaf_only_batches_equal_the_reference() -> None:
    # A unary node reads the zero state as its right child; a batch of single words has no
    # inner level at all.
    trees, vocab = forest(["(3 (2 (1 a) (4 b)))", "(1 (0 (2 c)))", "(2 (3 a) (1 (0 c)))"])
    assert_same_as_reference(build("tree_lstm", vocab), batch_of(trees, vocab))
    leaves, vocab = forest(["(2 yes)", "(4 great)"])
    model, batch = build("tree_lstm", vocab), batch_of(leaves, vocab)
    out = model(batch)
    torch.testing.assert_close(out.logits, reference_forward(model, batch).logits, atol=TOL, rtol=0)
    assert out.loss is not None
    out.loss.backward()
    assert model.compose.weight.grad is not None and not model.compose.weight.grad.any()


def test_tree_lstm_forest_backward_passes_gradcheck() -> None:
    # The written-out backward against finite differences, on the raw inputs of the function.
    from treeqa.models.tree_lstm import _Forest

    trees, vocab = forest(SST_LINES[1:2] + ["(1 (0 (2 c)))"])
    batch = batch_of(trees, vocab)
    plan, n0, d = LevelOrder.of(batch), len(batch.levels[0]), 2
    kids = fixed_children(batch, plan, arity=2)
    g = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(shape, dtype=torch.float64, generator=g, requires_grad=True)
        for shape in ((n0, d), (n0, d), (5 * d, 2 * d), (5 * d,))
    ]
    assert torch.autograd.gradcheck(lambda *t: _Forest.apply(*t, plan, kids), inputs)


@pytest.mark.parametrize("cell", ["gru", "seed"])
def test_tree_gru_forest_backward_passes_gradcheck(cell: str) -> None:
    # Fan-out up to 3 (nodes without an i-th child keep their state), attention.
    from treeqa.models.tree_gru import _Forest

    trees, vocab = forest(random_forest(20, 3, n=2))  # 9 nodes, 4 levels, steps of 2, 1, 1
    batch = batch_of(trees, vocab)
    plan, n0, d, a = LevelOrder.of(batch), len(batch.levels[0]), 2, 1
    slots = ChildSlots.of(batch, plan)
    assert max(map(len, slots.steps)) == 3 and any(len(set(level)) > 1 for level in slots.steps)
    g = torch.Generator().manual_seed(0)
    shapes = [(n0, d), (len(slots.child), 3 * d + a), (3 * d + a, d), (3 * d, d), (3 * d,)]
    shapes += [(1, a), (1,)]
    inputs = [
        torch.randn(shape, dtype=torch.float64, generator=g, requires_grad=True) for shape in shapes
    ]
    assert torch.autograd.gradcheck(lambda *t: _Forest.apply(*t, plan, slots, cell), inputs)


def test_child_slots_visit_each_child_once_in_step_order() -> None:
    # Level by level, then step i, then the level's nodes with an i-th child: a prefix of it.
    trees, vocab = forest(random_forest(40, 4, n=3))
    batch = batch_of(trees, vocab)
    plan = LevelOrder.of(batch)
    slots = ChildSlots.of(batch, plan)
    non_roots = (batch.parent >= 0).nonzero().view(-1)
    assert sorted(slots.child.tolist()) == non_roots.tolist()
    assert torch.equal(batch.parent[slots.child], slots.parent)
    assert torch.equal(plan.position[slots.child], slots.position)
    pairs = iter(zip(slots.parent.tolist(), slots.child.tolist(), strict=True))
    for level, sizes in zip(batch.levels[1:], slots.steps, strict=True):
        assert sizes[0] == len(level) and list(sizes) == sorted(sizes, reverse=True)
        for i, n in enumerate(sizes):
            for node in level[:n].tolist():  # the first n nodes of the level have an i-th child
                assert next(pairs) == (node, batch.children(node)[i])
    assert next(pairs, None) is None


def test_childsum_forest_backward_passes_gradcheck() -> None:
    from treeqa.models.childsum import _Forest

    trees, vocab = forest(random_forest(22, 4, n=2))  # 13 nodes, 5 levels
    batch = batch_of(trees, vocab)
    plan, n0, d = LevelOrder.of(batch), len(batch.levels[0]), 2
    slots = ChildSlots.of(batch, plan)
    assert max(map(len, slots.steps)) >= 3 and any(len(set(level)) > 1 for level in slots.steps)
    g = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(shape, dtype=torch.float64, generator=g, requires_grad=True)
        for shape in ((n0, d), (n0, d), (len(plan.inner), 4 * d), (3 * d, d), (d, d))
    ]
    assert torch.autograd.gradcheck(lambda *t: _Forest.apply(*t, plan, slots), inputs)


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_under_cpu_bfloat16_autocast(name: str, overrides: dict[str, object]) -> None:
    trees, vocab = forest(SST_LINES)
    model = build(name, vocab, **overrides).float()
    exact = model(batch_of(trees, vocab)).logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(batch_of(trees, vocab))
    assert out.loss is not None
    out.loss.backward()
    torch.testing.assert_close(out.logits.float(), exact, atol=0.1, rtol=0.05)
    for name, p in model.named_parameters():
        assert p.grad is not None and bool(dense(p.grad).isfinite().all()), name


def test_inference_without_autograd_matches_training_mode_forward() -> None:
    trees, vocab = forest(SST_LINES)
    for name in ("tree_lstm", "childsum", "tree_gru"):
        model = build(name, vocab).eval()
        with torch.no_grad():
            quiet = model(batch_of(trees, vocab)).logits
        assert not quiet.requires_grad
        torch.testing.assert_close(quiet, model(batch_of(trees, vocab)).logits.detach())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["tree_lstm", "childsum", "tree_gru"])
def test_on_gpu_the_same_logits_and_gradients_as_on_cpu(name: str) -> None:
    trees, vocab = forest(SST_LINES)
    batch = batch_of(trees, vocab)
    model = build(name, vocab).float()
    on_gpu = copy.deepcopy(model).cuda()
    runs = []
    for m, b in ((model, batch), (on_gpu, batch.to("cuda"))):
        out = m(b)
        assert out.loss is not None
        out.loss.backward()
        grads = {k: dense(p.grad).cpu() for k, p in m.named_parameters() if p.grad is not None}
        runs.append((out.logits.detach().cpu(), grads))
    (cpu_logits, cpu_grads), (gpu_logits, gpu_grads) = runs
    torch.testing.assert_close(gpu_logits, cpu_logits, atol=1e-4, rtol=1e-4)
    assert gpu_grads.keys() == cpu_grads.keys()
    for k, g in cpu_grads.items():
        torch.testing.assert_close(gpu_grads[k], g, atol=1e-4, rtol=1e-3, msg=k)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = on_gpu(batch.to("cuda")).loss
    assert loss is not None and bool(torch.isfinite(loss))
    loss.backward()


@pytest.mark.parametrize("name", list(SENTIMENT_MODELS))
def test_sizes_below_one_name_the_field(name: str) -> None:
    config_cls = SENTIMENT_MODELS[name][0]
    with pytest.raises(ValueError) as err:
        build_sentiment_model(name, config_cls(embed_dim=0), 10)
    assert str(err.value) == "model.embed_dim: expected at least 1, got 0"
    if hasattr(config_cls(), "hidden_dim"):
        # Was "not enough values to unpack (expected 2, got 1)" for the Tree-LSTM.
        with pytest.raises(ValueError) as err:
            build_sentiment_model(name, config_cls(hidden_dim=0), 10)
        assert str(err.value) == "model.hidden_dim: expected at least 1, got 0"


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_a_weight_changed_in_place_before_the_backward_is_refused(
    name: str, overrides: dict[str, object]
) -> None:
    # Regression: the Tree-GRU's backward read its attention weight and (through a view kept
    # for the first child step) node_hidden.bias without saving them, so an in-place change
    # between forward and backward (an optimiser step taken before a retained graph's
    # backward) gave every weight wrong gradients, silently.
    trees, vocab = forest(SST_LINES)
    batch = batch_of(trees, vocab)
    model = build(name, vocab, **overrides)
    loss = model(batch).loss
    assert loss is not None
    loss.backward()
    clean = {k: dense(p.grad).clone() for k, p in model.named_parameters()}  # type: ignore[union-attr]
    for changed, param in model.named_parameters():
        model.zero_grad(set_to_none=True)
        loss = model(batch).loss
        assert loss is not None
        with torch.no_grad():
            param.add_(1.0)
        try:
            loss.backward()
        except RuntimeError as err:
            assert "modified by an inplace operation" in str(err), changed
        else:  # a backward that does not read the changed weight gives the same gradients
            for k, p in model.named_parameters():
                torch.testing.assert_close(dense(p.grad), clean[k], msg=f"{k} ({changed})")
        with torch.no_grad():
            param.sub_(1.0)


DEP_WORDS = "the a film is not good bad great dull very it".split()
TAG_NAMES = ["DT", "NN", "VBZ", "RB", "JJ", "PRP"]
REL_NAMES = ["det", "nsubj", "neg", "amod", "advmod"]  # and ROOT at the root
DEP_TAGS, DEP_RELS = Vocab.build(TAG_NAMES), Vocab.build(["ROOT", *REL_NAMES])
DEP_SIZES = {"num_tags": len(DEP_TAGS), "num_rels": len(DEP_RELS)}


def dependency_batch(heads: list[list[int]], rng: random.Random) -> tuple[TreeBatch, Vocab]:
    """Random dependency trees of the given shapes (``heads`` as in ``from_record``), with
    POS tags and relations, and about a third of the non-root nodes unlabelled."""
    trees = []
    for h in heads:
        n = len(h)
        record = {
            "tokens": [rng.choice(DEP_WORDS) for _ in range(n)],
            "tags": [rng.choice(TAG_NAMES) for _ in range(n)],
            "heads": h,
            "rels": ["ROOT"] + [rng.choice(REL_NAMES) for _ in range(1, n)],
            "labels": [rng.randint(0, 4)] + [rng.choice([-1, -1, 0, 2, 4]) for _ in h[1:]],
        }
        trees.append(from_record(record))
    vocab = Vocab.build(w for t in trees for w in t.words)
    return collate([encode(t, vocab, "fine", DEP_TAGS, DEP_RELS) for t in trees]), vocab


def chain(n: int) -> list[int]:
    return [-1, *range(n - 1)]


def edge_shapes(depth: int, rng: random.Random) -> list[list[int]]:
    """Single nodes, a chain (every node one child) ``depth`` deep, a node with 30 children,
    and an ordinary tree: heights from 0 to ``depth - 1`` in one batch."""
    ordinary = [-1] + [rng.randrange(i) for i in range(1, 12)]
    return [[-1], chain(depth), [-1] + [0] * 30, ordinary, [-1], chain(3)]


GRU_OPTIONS = [
    {"cell": cell, "attention_dim": a, **tr}
    for cell in ("gru", "seed")
    for a in (0, 3)
    for tr in ({}, {"tag_dim": 3, "rel_dim": 2, **DEP_SIZES})
]


@pytest.mark.parametrize(
    ("name", "overrides"), [("childsum", {})] + [("tree_gru", o) for o in GRU_OPTIONS]
)
@pytest.mark.parametrize("embedding", ["sparse", "dense", "frozen"])
def test_edge_shaped_dependency_forests_equal_the_reference(
    name: str, overrides: dict[str, object], embedding: str
) -> None:
    rng = random.Random(7)
    batch, vocab = dependency_batch(edge_shapes(40, rng), rng)
    model = build(name, vocab, sparse_embedding=embedding == "sparse", **overrides)
    if embedding == "frozen":  # what --emblr 0 does
        model.embed.weight.requires_grad_(False)
    assert_same_as_reference(model, batch)
    assert (model.embed.weight.grad is None) == (embedding == "frozen")
    one, vocab = dependency_batch([edge_shapes(40, rng)[3]], rng)  # a batch of one tree
    assert_same_as_reference(build(name, vocab, **overrides), one)


@pytest.mark.parametrize(("name", "overrides"), [("childsum", {}), ("tree_gru", GRU_OPTIONS[-1])])
def test_a_500_deep_chain_beside_shallow_trees_equals_the_reference(
    name: str, overrides: dict[str, object]
) -> None:
    rng = random.Random(8)
    batch, vocab = dependency_batch(edge_shapes(500, rng), rng)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5_000))  # the reference recurses once per level
    try:
        assert_same_as_reference(build(name, vocab, **overrides), batch)
    finally:
        sys.setrecursionlimit(limit)
