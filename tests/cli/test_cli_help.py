"""What each command's ``--help`` shows, and what a flag of the other task gets."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from treeqa.cli import flags
from treeqa.cli.main import build_parser, main

REPORT = (
    "--model tree_gru --emblr 0 --rel_dim 0 --tag_dim 0 --optim adagrad --name basic --lr 0.05 "
    "--wd 1e-4 --at_hid_dim 0"
).split()
"""The original Tree-GRU report's command line, after `treeqa train sentiment`."""

SENTIMENT_TRAINING = ["--config", "--out", "--name", "--data", "--task", "--vectors", "--model"]
SENTIMENT_TRAINING += ["--tag_dim", "--rel_dim", "--at_hid_dim", "--epochs", "--batch_size"]
SENTIMENT_TRAINING += ["--optim", "--lr", "--emblr", "--wd", "--seed", "--health"]
SENTIMENT_ONLY = ["--task", "--vectors", "--model", "--tag_dim", "--rel_dim", "--at_hid_dim"]
SENTIMENT_ONLY += ["--emblr", "--wd"]
QA_SCORING = ["--gold", "--predictions", "--squad-version", "--na-probs", "--na-prob-thresh"]
QA_SCORING += ["--prepared", "--write-predictions"]

# argv -> (flags its --help shows, flags it must not show: the other task's)
HELP = {
    ("train", "sentiment"): (SENTIMENT_TRAINING + ["--resume", "--json"], ["--prepared"]),
    ("train",): (SENTIMENT_TRAINING + ["--resume", "--json"], ["--prepared"]),
    ("train", "qa"): (
        ["--config", "--resume", "--out", "--json", "--name", "--prepared", "--epochs"]
        + ["--batch_size", "--optim", "--lr", "--seed", "--health"],
        SENTIMENT_ONLY,
    ),
    ("evaluate",): (
        ["--checkpoint", "--split", "--json", "--seeds"] + SENTIMENT_TRAINING,
        QA_SCORING,
    ),
    ("evaluate", "qa"): (
        QA_SCORING + ["--checkpoint", "--split", "--json"],
        ["--seeds", "--config", "--data", "--epochs", *SENTIMENT_ONLY],
    ),
    ("predict",): (
        ["--checkpoint", "TREE", "--text", "--input", "--demo-examples", "--output", "--json"],
        ["--context", "--question"],
    ),
    ("predict", "qa"): (
        ["--checkpoint", "--context", "--question", "--input", "--output", "--json"],
        ["TREE", "--text", "--demo-examples"],
    ),
}


def help_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def shows(text: str, flag: str) -> bool:
    """``flag`` as a word of ``text``: not ``--model`` in ``--model.d_model``."""
    return re.search(rf"(?<![\w.-]){re.escape(flag)}(?![\w.-])", text) is not None


@pytest.mark.parametrize("argv", list(HELP), ids=" ".join)
def test_help_shows_the_commands_own_flags_only(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    own, other = HELP[argv]
    text = help_text(list(argv), capsys)
    assert [f for f in own if not shows(text, f)] == []
    assert [f for f in other if shows(text, f)] == []
    assert "example:" in text


def test_train_and_train_sentiment_are_one_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert help_text(["train"], capsys) == help_text(["train", "sentiment"], capsys)


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command's parser, both tasks', by name."""

    def walk(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        yield parser.prog, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from walk(sub)

    seen = dict(walk(build_parser("sentiment")))
    seen.update(walk(build_parser("qa")))
    return iter(seen.items())


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]


def test_every_command_is_reached() -> None:
    names = {name for name, _ in parsers()}
    for command in ("train [sentiment]", "train qa", "evaluate [sentiment]", "evaluate qa"):
        assert f"treeqa {command}" in names
    for command in ("predict [sentiment]", "predict qa", "serve", "doctor", "data download"):
        assert f"treeqa {command}" in names
    for command in ("data stats", "data demo", "data prepare squad"):
        assert f"treeqa {command}" in names


@pytest.mark.parametrize("name, parser", list(parsers()), ids=[n for n, _ in parsers()])
def test_every_flag_says_what_it_does_and_its_default(
    name: str, parser: argparse.ArgumentParser
) -> None:
    text = parser.format_help()
    usage = parser.format_usage()
    for action in options(parser):
        flag = action.option_strings[-1]
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        assert action.help, f"{name} {flag}: no help"
        if action.required:
            assert flag in usage, f"{name}: the usage line leaves out required {flag}"
        else:
            assert "default" in action.help, f"{name} {flag}: no default in {action.help!r}"
        if action.choices:
            listed = "{" + ",".join(action.choices) + "}"
            assert listed in text, f"{name} {flag}: its choices are not listed"
    for action in parser._actions:
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
            shown = str(action.metavar or action.dest).removesuffix(" ...")
            assert shown in usage, f"{name}: the usage line leaves out {shown}"


def test_the_config_flags_state_the_configs_own_defaults() -> None:
    from treeqa.recipes import qa, sentiment

    def value(config: Any, key: str) -> Any:
        for part in key.split("."):
            config = getattr(config, part)
        return config

    for flag in flags.CONFIG_FLAGS:
        for task, default in flag.defaults.items():
            if task == "qa":
                config = qa.resolve_config({}, [])
            else:
                config = sentiment.resolve_config({}, [("model", flag.only or "bow")])
            actual = value(config, flag.key)
            stated = type(actual)(default) if actual != "" else default
            assert stated == actual, f"{task} --{flag.name}: help says {default}, config {actual}"


def test_the_report_command_line_works_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from treeqa.recipes import sentiment

    trained = []

    def train(config: Any, out: Path, resume_run: bool) -> dict[str, Any]:
        trained.append((config, out))
        return {"best_dev": 0.5, "best_epoch": 1, "aborted": False}

    monkeypatch.setattr(sentiment, "train", train)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "sentiment", *REPORT]) == 0
    ((config, out),) = trained
    assert out == Path("runs/basic") and config.name == "basic"
    assert (config.model.name, config.model.attention_dim) == ("tree_gru", 0)
    assert (config.model.rel_dim, config.model.tag_dim) == (0, 0)
    assert (config.train.optim, config.train.lr, config.train.emb_lr) == ("adagrad", 0.05, 0.0)
    assert config.train.weight_decay == 1e-4
    text = help_text(["train", "sentiment"], capsys)
    assert [f for f in REPORT if f.startswith("--") and not shows(text, f)] == []


@pytest.mark.parametrize(
    "argv, flag, owner",
    [
        (["train", "qa", "--emblr", "0"], "--emblr", "train sentiment"),
        (["train", "qa", "--rel-dim=0", "--out", "x"], "--rel_dim", "train sentiment"),
        (["train", "qa", "--model", "tree_lstm"], "--model", "train sentiment"),
        (["train", "sentiment", "--prepared", "x"], "--prepared", "train qa"),
        (["train", "--prepared", "x"], "--prepared", "train qa"),
        (["evaluate", "qa", "--config", "c.toml"], "--config", "evaluate sentiment"),
        (["evaluate", "--checkpoint", "r", "--gold", "g.json"], "--gold", "evaluate qa"),
        (["predict", "qa", "--checkpoint", "r", "--demo-examples"], "--demo-examples", "predict"),
        (["predict", "--checkpoint", "r", "--question", "Why?"], "--question", "predict qa"),
    ],
)
def test_a_flag_of_the_other_task_is_refused_in_one_line(
    argv: list[str], flag: str, owner: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    task = "qa" if argv[1] == "qa" else "sentiment"
    command = f"{argv[0]} qa" if task == "qa" else argv[0]
    assert err.startswith(f"treeqa {command}: error: {flag} is for ")
    assert f"treeqa {owner}" in err and f"treeqa {argv[0]} {task} does not" in err
    assert err.count("\n") == 1


def test_the_error_exits_2_from_the_shell() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "treeqa", "train", "qa", "--emblr", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (
        "treeqa train qa: error: --emblr is for sentiment: treeqa train sentiment takes it, "
        "treeqa train qa does not\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["evaluate", "--checkpoint", "r", "--epochs", "3", "--train.patience=2"],
            "--epochs and --train.patience do nothing without --seeds",
        ),
        (
            ["evaluate", "--seeds", "2", "--checkpoint", "r"],
            "--checkpoint does nothing with --seeds",
        ),
        (
            ["evaluate", "qa", "--checkpoint", "r", "--prepared", "p", "--gold", "g.json"],
            "--gold does nothing with --checkpoint",
        ),
        (
            ["evaluate", "qa", "--gold", "g.json", "--predictions", "p.json", "--split", "dev"],
            "--split does nothing without --checkpoint",
        ),
        (
            ["evaluate", "qa", "--gold", "g", "--predictions", "p", "--na-prob-thresh", "0.5"],
            "--na-prob-thresh does nothing without --na-probs",
        ),
    ],
)
def test_a_flag_the_command_would_ignore_is_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    command = "evaluate qa" if argv[1] == "qa" else "evaluate"
    assert err.startswith(f"treeqa {command}: error: {message}") and err.count("\n") == 1
