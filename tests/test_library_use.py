"""treeqa used as a library, as a researcher's own script uses it: trees built by hand, a model
of one's own through the level-wise batching and ``fit()``, the standard callbacks reused
across two fits, and QANet built from Python."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from treeqa.data.batching import TreeBatch, batches, encode
from treeqa.data.tree import Tree, parse_tree
from treeqa.data.vocab import Vocab
from treeqa.models.common import Output, node_loss
from treeqa.models.qanet import QANet, QANetConfig
from treeqa.train import checkpoint as ckpt
from treeqa.train.callbacks import Checkpointer
from treeqa.train.ema import EMA
from treeqa.train.loop import TrainConfig, fit

SENTENCES = [
    "(3 (2 good) (2 film))",
    "(1 (2 bad) (2 film))",
    "(4 (3 (3 very) (3 good)) (2 film))",
    "(0 (1 (1 not) (3 good)) (2 film))",
]
CONFIG = TrainConfig(epochs=2, batch_size=2, device="cpu", health="off", metric="acc")


class TreeRNN(nn.Module):
    """A tree model of a user's own: h = tanh(x + W sum(children's h)), level by level."""

    def __init__(self, vocab_size: int, dim: int = 8, classes: int = 5):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.combine = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, classes)

    def forward(self, batch: TreeBatch) -> Output:
        x = self.embed(batch.words)  # [N, D]
        h = torch.zeros_like(x)  # [N, D]
        child = batch.parent >= 0  # [N]
        for level in batch.levels:
            summed = torch.zeros_like(h).index_add(0, batch.parent[child], h[child])  # [N, D]
            h = h.index_copy(0, level, torch.tanh(x[level] + self.combine(summed[level])))
        logits = self.out(h)  # [N, C]
        return Output(logits, node_loss(logits, batch.targets))


def encoded() -> tuple[Vocab, list]:
    trees = [parse_tree(s) for s in SENTENCES]
    vocab = Vocab.build(w for t in trees for w in t.tokens)
    return vocab, [encode(t, vocab, "fine") for t in trees]


def test_a_tree_built_by_hand_takes_lists_and_batches_as_a_read_one() -> None:
    read = parse_tree("(3 (2 (1 a) (1 b)) (4 c))")
    parent, labels = [-1, 0, 1, 1, 0], [3, 2, 1, 1, 4]
    built = Tree(parent, labels, (None, None, "a", "b", "c"))  # type: ignore[arg-type]
    assert built == read and built.to_ptb() == read.to_ptb() and built.phrase(1) == "a b"
    vocab = Vocab.build(read.tokens)
    # Was "'>=' not supported between instances of 'list' and 'int'" in the batching.
    a, b = (batches([encode(t, vocab, "fine")], 1, False)[0] for t in (built, read))
    assert all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("words", "targets", "parent"))


@pytest.mark.parametrize(
    ("parent", "labels", "words", "message"),
    [
        # Breadth-first: batched without error, it printed as "(3 (2  (4 c) (1 a)) (1 b))".
        ([-1, 0, 0, 1, 1], [3, 2, 4, 1, 1], (None, None, "c", "a", "b"), "node 3's parent, 1,"),
        ([0, 0, 0], [3, 2, 2], (None, "a", "b"), r"parent\[0\] is -1"),
        ([-1, 0, 0], [3, 7, 2], (None, "a", "b"), "labels are 0-4"),
        ([-1, 0, 0], [3, 2, 2], (None, "a", None), "node 2 is a leaf with no word"),
        ([-1, 0], [3, 2, 2], (None, "a", "b"), "one entry per node"),
    ],
)
def test_a_tree_built_by_hand_out_of_shape_is_refused_naming_the_node(
    parent: list[int], labels: list[int], words: tuple[str | None, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Tree(parent=np.array(parent), labels=np.array(labels), words=words)


def test_a_model_of_ones_own_trains_saves_and_loads_back(tmp_path: Path) -> None:
    vocab, trees = encoded()
    torch.manual_seed(0)
    model = TreeRNN(len(vocab))
    meta = {"model": "tree_rnn", "vocab": list(vocab.tokens)}
    state = fit(
        model,
        torch.optim.Adam(model.parameters(), 1e-2),
        lambda epoch: batches(trees, 2, True, epoch),
        CONFIG,
        evaluate=lambda m: {"acc": 0.5},
        callbacks=[Checkpointer(tmp_path, meta)],
    )
    assert state.step == 4
    again = TreeRNN(len(vocab))
    loaded = ckpt.load(tmp_path, prefer=ckpt.LAST)  # best is epoch 1: its score stayed
    loaded.load_weights(again)
    assert loaded.meta["vocab"] == list(vocab.tokens)
    batch = batches(trees, 4, False)[0]
    model.eval(), again.eval()
    assert torch.equal(model(batch).logits, again(batch).logits)


def test_checkpointer_meta_a_header_cannot_hold_is_refused_before_training(
    tmp_path: Path,
) -> None:
    # Was: "Object of type QANetConfig is not JSON serializable", after the first epoch.
    with pytest.raises(TypeError, match=r"meta\['config'\] is a QANetConfig.*to_dict"):
        Checkpointer(tmp_path, {"model": "qanet", "config": QANetConfig()})


class Losses(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.linear, self.kind = nn.Linear(3, 2), kind

    def forward(self, x: torch.Tensor) -> Output:
        logits = self.linear(x)  # [B, 2]
        each = nn.functional.cross_entropy(
            logits, torch.zeros(len(x), dtype=torch.long), reduction="none"
        )
        loss = {
            "per-example": each,
            "float": 1.0,
            "detached": each.mean().detach(),
            "shape [1]": each.mean().reshape(1),
        }[self.kind]
        return Output(logits, loss)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        # Were torch's "grad can be implicitly created only for scalar outputs", "'float' object
        # has no attribute 'backward'", "element 0 of tensors does not require grad" and
        # "output with shape [] doesn't match the broadcast shape [1]".
        ("per-example", r"Output.loss has shape \[4\]; fit\(\) takes one number"),
        ("float", r"Output.loss is a float; fit\(\) takes a tensor"),
        ("detached", "Output.loss does not require grad"),
        ("shape [1]", r"Output.loss has shape \[1\]"),
    ],
)
def test_fit_names_a_loss_it_cannot_step_from(kind: str, message: str) -> None:
    model = Losses(kind)
    with pytest.raises((TypeError, ValueError), match=message):
        fit(model, torch.optim.SGD(model.parameters(), 0.1), lambda e: [torch.randn(4, 3)], CONFIG)


def test_an_ema_reused_for_a_second_fit_starts_from_the_second_model() -> None:
    vocab, trees = encoded()

    def train(model: nn.Module, ema: EMA) -> None:
        optimizer = torch.optim.SGD(model.parameters(), 0.1)
        data = lambda epoch: batches(trees, 2, False)  # noqa: E731
        fit(model, optimizer, data, CONFIG, evaluate=lambda m: {"acc": 0.5}, callbacks=[ema])

    reused = EMA(0.99)
    train(TreeRNN(len(vocab)), reused)
    torch.manual_seed(1)
    train(TreeRNN(len(vocab)), reused)
    torch.manual_seed(1)
    fresh = EMA(0.99)
    train(TreeRNN(len(vocab)), fresh)
    # Were the first run's shadows carried into the second's average.
    for name, shadow in fresh.shadow.items():
        torch.testing.assert_close(reused.shadow[name], shadow)

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = TreeRNN(len(vocab))

        def forward(self, batch: TreeBatch) -> Output:
            return self.inner(batch)

    # Was "EMA shadows in the checkpoint do not match the model's parameters".
    train(Wrapped(), reused)
    assert set(reused.shadow) == {f"inner.{name}" for name in fresh.shadow}


def test_qanet_given_vectors_of_another_width_names_word_dim() -> None:
    config = QANetConfig(d_model=8, heads=2, char_dim=4)  # word_dim 300 by default
    # Was torch's "The size of tensor a (300) must match the size of tensor b (6)".
    with pytest.raises(ValueError, match=r"shape \[10, 6\], expected \[10, 300\].*word_dim"):
        QANet(config, 10, 5, np.zeros((10, 6), dtype=np.float32))
    QANet(QANetConfig(d_model=8, heads=2, char_dim=4, word_dim=6), 10, 5, np.ones((10, 6)))
