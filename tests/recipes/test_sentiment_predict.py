"""``sentiment.predict`` from Python: a model a loop left in training mode answers as in eval
mode, and what it is given wrongly (a QA model, a bare tree, a generator) is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from treeqa.data.tree import parse_tree
from treeqa.recipes import qa, sentiment

TREE = "(((the) (film)) ((is) ((not) (good))))"


@pytest.fixture(scope="module")
def run(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("childsum") / "run"
    overrides = [("data", str(demo_dir)), ("model", "childsum"), ("epochs", "1"),
                 ("health", "off"), ("model.embed_dim", "6"), ("model.hidden_dim", "5"),
                 ("model.dropout", "0.5")]  # fmt: skip
    sentiment.train(sentiment.resolve_config({}, overrides), out)
    return out


def test_a_model_in_training_mode_predicts_without_dropout_and_stays_in_it(run: Path) -> None:
    loaded = sentiment.load_model(run, device="cpu")
    expected = sentiment.predict(loaded, [parse_tree(TREE)])
    loaded.model.train()  # as fit() leaves a model it trained with no evaluate
    for _ in range(3):  # dropout at 0.5 would give other probabilities each time
        assert sentiment.predict(loaded, [parse_tree(TREE)]) == expected
    assert loaded.model.training


def test_what_predict_cannot_take_is_named(run: Path) -> None:
    loaded = sentiment.load_model(run, device="cpu")
    tree = parse_tree(TREE)
    with pytest.raises(TypeError, match=r"trees is a Tree; give a list of Trees \(\[tree\] for"):
        sentiment.predict(loaded, tree)  # type: ignore[arg-type]
    # Was: "range() arg 3 must not be zero" (the check read the generator to its end).
    with pytest.raises(TypeError, match="trees is a generator; give a list of Trees"):
        sentiment.predict(loaded, (t for t in [tree]))  # type: ignore[arg-type]
    # Was: "'Loaded' object has no attribute 'encode'" (the QA recipe's Loaded).
    other = qa.Loaded(loaded.model, loaded.vocab, loaded.vocab, 16, 0.0, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"recipes\.qa\.Loaded, not a sentiment model: give"):
        sentiment.predict(other, [tree])  # type: ignore[arg-type]


def test_a_loop_of_ones_own_checkpoints_what_the_commands_load_with_the_recipes_meta(
    tmp_path: Path,
) -> None:
    """``Checkpointer(run, meta)`` in a ``fit()`` of one's own: a meta of one's own makes a
    checkpoint the commands refuse, naming the recipe's ``run_meta``; with it, they load it."""
    import torch

    from treeqa.data.batching import batches, encode
    from treeqa.data.vocab import Vocab
    from treeqa.models import build_sentiment_model
    from treeqa.train import checkpoint as ckpt
    from treeqa.train import provenance
    from treeqa.train.callbacks import Checkpointer
    from treeqa.train.loop import fit

    overrides = [("model", "tree_lstm"), ("epochs", "1"), ("train.optim", "adam")]
    config = sentiment.resolve_config({}, [*overrides, ("model.sparse_embedding", "false")])
    texts = ["(3 (2 a) (4 (3 good) (2 film)))", "(1 (2 a) (0 (1 bad) (2 film)))"]
    trees = [parse_tree(s) for s in texts * 4]
    vocab = Vocab.build(w for t in trees for w in t.words if w is not None)
    encoded = [encode(t, vocab, config.data.task) for t in trees]
    made = provenance.made_with([])
    for name, meta in (
        ("own", {"note": "mine"}),
        ("recipe", sentiment.run_meta(config, vocab, None, None, made)),
    ):
        model = build_sentiment_model(config.model.name, config.model, len(vocab))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        fit(
            model,
            optimizer,
            lambda epoch: batches(encoded, 4, True, seed=epoch),
            config.train,
            evaluate=lambda m: sentiment.evaluate_model(m, encoded, config.data.task),
            callbacks=[Checkpointer(tmp_path / name, meta)],
        )
    with pytest.raises(ckpt.CheckpointError, match="a checkpoint with no task.*run_meta"):
        sentiment.load_model(tmp_path / "own")
    loaded = sentiment.load_model(tmp_path / "recipe")
    [result] = sentiment.predict(loaded, [parse_tree("(2 (2 a) (2 (2 good) (2 film)))")])
    assert len(result["nodes"]) == 5 and result["label"] in range(5)
