"""Word vectors for the sentiment recipe: one file, or several side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from treeqa.config import ConfigError
from treeqa.data.vocab import Vocab
from treeqa.recipes.sentiment import SentimentData, build_vectors


def write_glove(path: Path, rows: dict[str, list[float]]) -> str:
    path.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in rows.items()))
    return str(path)


def test_files_joined_by_plus_are_concatenated(tmp_path: Path) -> None:
    vocab = Vocab.build(["good", "film", "bad", "Good"])
    a = write_glove(tmp_path / "a.txt", {"good": [1.0, 2.0], "film": [3.0, 4.0]})
    b = write_glove(tmp_path / "b.txt", {"bad": [5.0, 6.0, 7.0], "good": [8.0, 9.0, 10.0]})
    one = build_vectors(SentimentData(vectors=a), vocab)
    both = build_vectors(SentimentData(vectors=f"{a}+{b}"), vocab)
    assert one is not None and both is not None
    assert both.shape == (len(vocab), 5)
    np.testing.assert_array_equal(both[:, :2], one)  # the first file's columns are unchanged
    row = vocab.index
    np.testing.assert_array_equal(both[row["good"]], [1, 2, 8, 9, 10])
    np.testing.assert_array_equal(both[row["Good"]], [1, 2, 8, 9, 10])  # lower-case fallback
    np.testing.assert_array_equal(both[row["bad"], 2:], [5, 6, 7])
    assert np.all(np.abs(both[row["bad"], :2]) <= 0.05)  # missing from the first: small random
    np.testing.assert_array_equal(both[0], np.zeros(5))  # padding


def test_an_existing_path_with_a_plus_is_one_file(tmp_path: Path) -> None:
    vocab = Vocab.build(["good"])
    path = write_glove(tmp_path / "glove+extra.txt", {"good": [1.0, 2.0, 3.0]})
    vectors = build_vectors(SentimentData(vectors=path), vocab)
    assert vectors is not None and vectors.shape == (len(vocab), 3)
    np.testing.assert_array_equal(vectors[vocab.index["good"]], [1, 2, 3])


def test_under_torchrun_process_0_alone_reports_the_vectors_coverage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vocab = Vocab.build(["good", "film"])
    path = write_glove(tmp_path / "a.txt", {"good": [1.0, 2.0]})
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, lines in (("0", 1), ("1", 0)):
        monkeypatch.setenv("RANK", rank)
        assert build_vectors(SentimentData(vectors=path), vocab) is not None
        assert capsys.readouterr().out.count("vectors: ") == lines


def test_an_empty_part_of_a_joined_path_is_an_error(tmp_path: Path) -> None:
    vocab = Vocab.build(["good"])
    path = write_glove(tmp_path / "a.txt", {"good": [1.0, 2.0]})
    for given in (f"{path}+", f"+{path}", f"{path}++{path}"):
        with pytest.raises(ConfigError, match="empty part"):
            build_vectors(SentimentData(vectors=given), vocab)


def test_an_embed_dim_given_against_the_vectors_width_is_refused_before_reading(
    tmp_path: Path,
) -> None:
    # The model's default (300) given by hand with 2-d + 3-d vectors used to be replaced
    # without a word; any value given is now checked, from the files' first lines.
    from treeqa.recipes.sentiment import resolve_config

    a = write_glove(tmp_path / "a.txt", {"good": [1.0, 2.0]})
    b = write_glove(tmp_path / "b.txt", {"bad": [5.0, 6.0, 7.0]})
    base = [("model", "tree_lstm"), ("vectors", f"{a}+{b}")]
    for given in ("300", "2"):
        with pytest.raises(
            ConfigError, match=f"model.embed_dim {given}: the vectors in .* are 5-d"
        ):
            resolve_config({}, [*base, ("embed_dim", given)])
    assert resolve_config({}, [*base, ("model.embed_dim", "5")]).model.embed_dim == 5
    assert resolve_config({}, base).model.embed_dim == 300  # not given: the vectors set it
