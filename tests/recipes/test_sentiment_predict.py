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
