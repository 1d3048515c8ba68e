"""``treeqa predict`` (sentiment) as a user meets it: a tree the model cannot take is named
by its file line or argument before anything is predicted, and large inputs are written out
a batch at a time."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from treeqa.cli import predict as predict_cli
from treeqa.cli.main import main
from treeqa.data.sst import CLASSES, PREDICTED, TASKS, legend
from treeqa.recipes import sentiment


@pytest.fixture(scope="module")
def run(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny binary Tree-LSTM: it takes trees of at most two children per node."""
    out = tmp_path_factory.mktemp("tl") / "run"
    overrides = [("data", str(demo_dir)), ("model", "tree_lstm"), ("epochs", "1"),
                 ("health", "off"), ("model.embed_dim", "6"), ("model.hidden_dim", "5")]  # fmt: skip
    sentiment.train(sentiment.resolve_config({}, overrides), out)
    return out


def deep(levels: int) -> str:
    """A tree of 2 * levels + 1 nodes, ``levels`` deep."""
    tree = "(good)"
    for _ in range(levels):
        tree = f"({tree} (x))"
    return tree


def test_a_tree_the_model_cannot_take_is_named_by_its_line(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    src = tmp_path / "trees.txt"
    src.write_text(f"((the) (film))\n\n{deep(2600)}\n((a) (b))\n", encoding="utf-8")
    assert main(["predict", "--checkpoint", str(run), "--input", str(src)]) == 2
    assert capsys.readouterr().err == (
        f"treeqa predict: error: {src}:3: a tree of 5201 nodes; predict takes at most 5000 at once\n"
    )
    argv = ["predict", "--checkpoint", str(run), "((the) (film))", "", "((a) (b) (c))"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "treeqa predict: error: <command line>:3: this model takes trees with at most 2 children"
        " per node, got 3; use the Child-Sum Tree-LSTM (--model childsum) for any fan-out\n"
    )
    # Nothing is predicted before the error, so nothing is written.
    out = tmp_path / "out.jsonl"
    assert (
        main(["predict", "--checkpoint", str(run), "--input", str(src), "--output", str(out)]) == 2
    )
    assert not out.exists()


def test_a_large_input_is_predicted_a_batch_at_a_time_as_all_at_once(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trees = ["((the) (film))", "((not) ((very) (good)))", deep(40), "(bad)", "((a) (b))"]
    src = tmp_path / "trees.txt"
    src.write_text("\n".join(trees) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    argv = ["predict", "--checkpoint", str(run), "--input", str(src), "--output", str(out)]
    assert main(argv) == 0
    whole = out.read_text(encoding="utf-8")
    monkeypatch.setattr(predict_cli, "PREDICT_BATCH", 2)
    assert main(argv) == 0
    assert out.read_text(encoding="utf-8") == whole
    results = [json.loads(line) for line in whole.splitlines()]
    assert [r["text"] for r in results][:2] == ["the film", "not very good"]
    assert len(results) == 5 and len(results[2]["nodes"]) == 81


def test_standard_input_is_read_as_a_file_is_and_named_by_its_lines(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def stdin(data: bytes) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))

    capsys.readouterr()
    text = "((the) (film))\r\n\n((not) ((very) (good)))\n"
    src = tmp_path / "trees.txt"
    src.write_text(text, encoding="utf-8", newline="")
    argv = ["predict", "--checkpoint", str(run), "--json", "--input"]
    assert main([*argv, str(src)]) == 0
    from_file = capsys.readouterr().out
    stdin(text.encode())
    assert main([*argv, "-"]) == 0  # was: error: no such file '-'
    assert capsys.readouterr().out == from_file and len(from_file.splitlines()) == 2
    for data, message in (
        (b"((the) (film))\n\n((a) (b) (c))\n", "<stdin>:3: this model takes trees with at most 2"),
        (b"((the) (film))\n((a) (b)\n", "<stdin>:2:9: unbalanced '(': 1 bracket(s) left open"),
        (b"((the) (film))\n((caf\xe9) (b))\n", "<stdin>:2:6: not UTF-8 text (invalid continuation"),
    ):
        stdin(data)
        assert main([*argv, "-"]) == 2
        assert capsys.readouterr().err.startswith(f"treeqa predict: error: {message}")


@pytest.mark.parametrize(("data", "what"), [(b"", "empty"), (b"\n  \r\n", "blank lines only")])
def test_an_input_without_trees_is_named(
    run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    data: bytes,
    what: str,
) -> None:
    # Was: "nothing to predict: give trees, --text, --input FILE ...", --input FILE given.
    capsys.readouterr()
    for name in ("trees.txt", "trees.jsonl"):
        src = tmp_path / name
        src.write_bytes(data)
        assert main(["predict", "--checkpoint", str(run), "--input", str(src)]) == 2
        assert f"error: {src}: no trees in it ({what})" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["predict", "--checkpoint", str(run), "--input", "-"]) == 2
    assert f"error: <stdin>: no trees in it ({what})" in capsys.readouterr().err


def test_an_output_that_is_the_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "trees.txt"
    src.write_text("((the) (film))\n", encoding="utf-8")
    argv = ["predict", "--checkpoint", str(tmp_path / "none"), "--input", str(src)]
    assert main([*argv, "--output", str(src)]) == 2
    assert "is the --input file; write the results elsewhere" in capsys.readouterr().err
    assert src.read_text(encoding="utf-8") == "((the) (film))\n"


def test_an_output_that_is_the_models_checkpoint_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trees = tmp_path / "trees.txt"
    trees.write_text("((the) (film))\n")
    before = (run / "best.safetensors").read_bytes()
    for checkpoint in (run, run / "best.safetensors"):
        argv = ["predict", "--checkpoint", str(checkpoint), "--input", str(trees)]
        assert main([*argv, "--output", str(run / "best.safetensors")]) == 2
        assert "is a checkpoint of the model" in capsys.readouterr().err
    assert (run / "best.safetensors").read_bytes() == before
    config = (run / "config.toml").read_text()
    assert main(["predict", "--checkpoint", str(run), "--input", str(trees), "--output",
                 str(run / "config.toml")]) == 2  # fmt: skip
    assert f"--output {run / 'config.toml'} is a file of the run {run}" in capsys.readouterr().err
    assert (run / "config.toml").read_text() == config
    # Through a link (writing follows it), and by a run file's name not written yet.
    link = tmp_path / "link.toml"
    link.symlink_to(run / "config.toml")
    for target in (link, run / "health.7.json"):
        argv = ["predict", "--checkpoint", str(run), "--input", str(trees)]
        assert main([*argv, "--output", str(target)]) == 2
        assert f"--output {target} is a file of the run" in capsys.readouterr().err
    assert (run / "config.toml").read_text() == config and not (run / "health.7.json").exists()


def test_the_library_says_what_it_takes(run: Path, demo_dir: Path) -> None:
    loaded = sentiment.load_model(str(run))
    assert sentiment.predict(loaded, []) == []  # was range()'s "arg 3 must not be zero"
    with pytest.raises(TypeError, match=r"tree 0: a str, not a Tree \(treeqa.data.tree.parse_tree"):
        sentiment.predict(loaded, ["((good) (film))"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="split must be one of train, dev, test, got 'tset'"):
        sentiment.evaluate(run, str(demo_dir), "tset")


def test_the_text_output_says_what_its_labels_mean(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The numbers alone read differently by task: 2 is neutral on SST's fine scale and
    positive from a binary3 model (which never predicts its neutral class)."""
    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(run), "((the) (film))"]) == 0
    said = capsys.readouterr()
    assert said.err == (
        "labels (fine): 0 very negative, 1 negative, 2 neutral, 3 positive, 4 very positive\n"
    )
    assert said.out.split()[0] in "01234"
    assert main(["predict", "--checkpoint", str(run), "--json", "((the) (film))"]) == 0
    assert capsys.readouterr().err == ""  # JSON carries the label alone
    probs = torch.tensor([[0.2, 0.5, 0.3], [0.5, 0.4, 0.1]])  # neutral never wins in binary3
    assert set(sentiment.labels_of(probs, "binary3").tolist()) <= set(PREDICTED["binary3"])
    for task, classes in TASKS.items():  # every index of the probabilities is named
        said = legend(task).split("; ")
        assert said[0] == f"labels ({task}): " + ", ".join(
            f"{k} {CLASSES[task][k]}" for k in range(classes)
        )
        assert len(said) == (2 if task == "binary3" else 1)  # a label among some: says which


def test_printed_words_stay_on_their_line_whatever_breaks_they_hold(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A word may hold what ``str.splitlines`` breaks at (\\x0b, \\x85, \\u2028): printed, each
    tree is its line and each phrase its own; --json keeps the words as they are."""
    capsys.readouterr()
    tree = "((a\u2028b) ((c\x85d) (e\x0bf)))"
    argv = ["predict", "--checkpoint", str(run), tree]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.strip().split("  ", 1)[1] for line in lines] == ["a b c d e f", "c d e f"]
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == "a\u2028b c\x85d e\x0bf"


def strict_json(line: str) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def test_json_lines_are_strict_json_when_the_model_gives_nan(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint whose weights went NaN printed `"probabilities": [NaN, ...]`, which strict
    JSON readers (jq, JSON.parse) refuse: a number that is not finite is null."""
    from treeqa.train import checkpoint as ckpt

    saved = ckpt.load(run)
    tensors = {k: v.clone() for k, v in saved.tensors.items()}
    name = next(k for k in tensors if k.endswith("bias") and tensors[k].is_floating_point())
    tensors[name].fill_(float("nan"))
    meta = {k: v for k, v in saved.meta.items() if k != "format_version"}
    broken = tmp_path / "nan.safetensors"
    ckpt.atomic_save(tensors, meta, broken)
    capsys.readouterr()
    argv = ["predict", "--checkpoint", str(broken), "((the) (film))"]
    assert main([*argv, "--json"]) == 0
    printed = strict_json(capsys.readouterr().out)
    assert isinstance(printed, dict) and printed["probabilities"] == [None] * 5
    out = tmp_path / "out.jsonl"
    assert main([*argv, "--output", str(out)]) == 0
    assert strict_json(out.read_text(encoding="utf-8")) == printed


def test_words_an_ascii_only_output_cannot_hold_are_escaped_not_an_error(run: Path) -> None:
    # PYTHONIOENCODING=ascii with LC_ALL=C: was "error: 'ascii' codec can't encode ..." at café.
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"}
    argv = [sys.executable, "-m", "treeqa", "predict", "--checkpoint", str(run)]
    tree = "((café) (日本))"
    text = subprocess.run([*argv, tree], env=env, capture_output=True, check=False)
    assert (text.returncode, text.stderr.count(b"\n")) == (0, 2)  # the labels line, a note
    # (neither word is in the demo treebank's vocabulary: the note names them, escaped too)
    assert text.stderr.decode("ascii").splitlines()[1].startswith("note: 'caf\\xe9', '\\u65e5")
    assert text.stdout.decode("ascii").split("  ", 1)[1] == "caf\\xe9 \\u65e5\\u672c\n"
    lines = subprocess.run([*argv, tree, "--json"], env=env, capture_output=True, check=False)
    assert lines.returncode == 0 and lines.stderr == b""
    assert json.loads(lines.stdout.decode("ascii"))["text"] == "café 日本"


def test_an_output_cut_short_by_a_full_disk_or_ctrl_c_leaves_the_old_one_as_it_was(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"kept": true}\n', encoding="utf-8")
    argv = ["predict", "--checkpoint", str(run), "((the) (film))", "--output", str(out)]

    def disk_full(result: dict[str, object]) -> str:  # the disk fills as a line is written
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patched:
        patched.setattr(predict_cli, "json_line", disk_full)
        assert main(argv) == 2  # was: "error: [Errno 28] No space left on device", out emptied
    assert capsys.readouterr().err == (
        f"treeqa predict: error: {out}: could not be written (No space left on device); "
        "the out.jsonl already there is kept as it was\n"
    )

    def ctrl_c(*args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(sentiment, "predict", ctrl_c)
        assert main(argv) == 130
    assert capsys.readouterr().err == "treeqa predict: interrupted\n"
    assert out.read_text(encoding="utf-8") == '{"kept": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temporary left
    assert main(argv) == 0
    assert json.loads(out.read_text(encoding="utf-8"))["text"] == "the film"


def test_an_output_that_is_not_a_plain_file_is_written_directly(run: Path) -> None:
    argv = ["predict", "--checkpoint", str(run), "((the) (film))", "--output", os.devnull]
    assert main(argv) == 0 and Path(os.devnull).is_char_device()


def test_words_outside_the_vocabulary_are_named(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each is read as the one unknown word: a sentence of them gets a label that means little,
    so the JSON lists them and the text output says so on stderr."""
    tree = "((the) ((très) ((good) (zzyzx))))"
    assert main(["predict", "--checkpoint", str(run), tree, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unknown_words"] == ["très", "zzyzx"]
    assert main(["predict", "--checkpoint", str(run), tree]) == 0
    err = capsys.readouterr().err
    assert "note: 'très', 'zzyzx' not in the model's vocabulary" in err
    assert main(["predict", "--checkpoint", str(run), "((the) (film))"]) == 0
    assert "note:" not in capsys.readouterr().err
