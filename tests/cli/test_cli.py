"""Every subcommand end to end, in-process through ``main()``."""

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from treeqa.cli import data as cli_data
from treeqa.cli.main import main


def last_json(capsys: pytest.CaptureFixture[str]) -> dict:
    """Standard output under --json: one JSON object alone (what is said besides: stderr)."""
    return json.loads(capsys.readouterr().out)


def test_help_of_every_subcommand_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["train"],
        ["evaluate"],
        ["predict"],
        ["data"],
        ["data", "stats"],
        ["data", "download"],
        ["data", "demo"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--help"])
        assert exit_.value.code == 0
        assert "example:" in capsys.readouterr().out


def test_data_stats_names_unlabelled_nodes_and_a_gzip_or_zip_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip
    import zipfile

    trees = tmp_path / "trees.txt"
    trees.write_text("((the) (film))\n(3 (2 a) (4 gem))\n")
    assert main(["data", "stats", str(trees), "--json"]) == 0
    stats = last_json(capsys)["trees"]
    assert stats["labels"] == {"unlabelled": 3, "2": 1, "3": 1, "4": 1}
    assert stats["root_labels"] == {"unlabelled": 1, "3": 1}
    packed = tmp_path / "trees.txt.gz"
    packed.write_bytes(gzip.compress(trees.read_bytes()))
    assert main(["data", "stats", str(packed)]) == 2
    assert "trees.txt.gz:1:1: a gzip file" in capsys.readouterr().err
    archive = tmp_path / "trees.zip"  # as SST ships: it was "1:11: not UTF-8 text"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("trees.txt", (2013, 10, 1, 0, 0, 0)), trees.read_bytes())
    assert main(["data", "stats", str(archive)]) == 2
    assert "trees.zip:1:1: a zip archive: unzip it" in capsys.readouterr().err


def test_data_stats_names_a_missing_path_and_a_folder_given_for_a_tree_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # They were "[Errno 2] No such file or directory: '...'" and
    # "train.txt/train.txt: no such SST split file".
    missing, folder = tmp_path / "nonexist", tmp_path / "sst" / "train.txt"
    folder.mkdir(parents=True)
    assert main(["data", "stats", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"treeqa data stats: error: {missing}: no such file or directory (expected a tree "
        "file, or a folder of train/dev/test.txt or .jsonl)\n"
    )
    assert main(["data", "stats", str(folder)]) == 2
    assert capsys.readouterr().err == (
        f"treeqa data stats: error: {folder} is a directory, not a tree file, and holds no "
        "train/dev/test.txt (or .jsonl)\n"
    )
    for argv in (["data", "stats"], ["train", "--out", str(tmp_path / "run"), "--data"]):
        assert main([*argv, str(folder.parent)]) == 2
        said = capsys.readouterr().err
        assert said.endswith(f"error: {folder} is a directory, not a file of train trees\n")


def test_a_file_the_system_cannot_open_is_named_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was "[Errno 21] Is a directory: '...'": the system's words, path last in quotes.
    assert main(["predict", "--checkpoint", str(tmp_path / "run"), "--input", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"treeqa predict: error: {tmp_path}: Is a directory\n"


def test_data_stats_and_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "demo", "--out", str(tmp_path / "demo")]) == 0
    capsys.readouterr()
    assert main(["data", "stats", str(tmp_path / "demo"), "--json"]) == 0
    stats = last_json(capsys)
    assert stats["train"]["trees"] == 2000 and set(stats["test"]["root_labels"]) == {
        "0",
        "1",
        "2",
        "3",
        "4",
    }


def test_data_stats_of_a_file_of_no_tree_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty.txt").write_text("\n\n")
    assert main(["data", "stats", str(tmp_path / "empty.txt")]) == 0
    out, err = capsys.readouterr()
    assert "0 trees" in out and "node labels (none)" in out
    assert err == f"warning: {tmp_path / 'empty.txt'} holds no tree (empty, or blank lines only)\n"


def test_a_reader_gone_early_and_ctrl_c_are_said_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.txt").write_text("")
    # `treeqa data stats DIR | head -1`: the shell's status for SIGPIPE and nothing on stderr
    # (was "treeqa data: error: [Errno 32] Broken pipe", or Python's message at exit).
    assert main(["data", "demo", "--out", str(tmp_path / "train.txt")]) == 2  # a file
    assert capsys.readouterr().err == (
        f"treeqa data demo: error: {tmp_path / 'train.txt'} is a file; --out names the folder to "
        "write the demo into\n"
    )
    (tmp_path / "train.txt").unlink()
    assert main(["data", "demo", "--out", str(tmp_path)]) == 0
    argv = [sys.executable, "-m", "treeqa", "data", "stats", str(tmp_path)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()  # before it writes: its first write finds no reader
        assert child.stderr.read() == b""
        assert child.wait() == 128 + signal.SIGPIPE
    # Ctrl-C names the whole command and says what happened (it printed "treeqa data: ").
    from treeqa.data import sst

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sst, "read_tree_file", interrupted)
    capsys.readouterr()
    assert main(["data", "stats", str(tmp_path)]) == 130
    assert capsys.readouterr().err == "treeqa data stats: interrupted\n"


def test_train_evaluate_predict(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "sentiment",
                "--data",
                str(demo_dir),
                "--epochs",
                "2",
                "--out",
                str(run),
                "--json",
                "--train.log_every=5",
            ]
        )
        == 0
    )
    trained = last_json(capsys)
    assert trained["epochs"] == 2 and trained["best_epoch"] in (1, 2)
    assert main(["evaluate", "--checkpoint", str(run), "--split", "dev", "--json"]) == 0
    scores = last_json(capsys)
    assert scores["root_acc"] == pytest.approx(trained["best_dev"])
    assert scores["sentences"] == 60
    # A folder holding only the split to score will do.
    alone = tmp_path / "dev-only"
    alone.mkdir()
    (alone / "dev.txt").write_bytes((demo_dir / "dev.txt").read_bytes())
    argv = ["evaluate", "--checkpoint", str(run), "--split", "dev", "--data", str(alone)]
    assert main([*argv, "--json"]) == 0
    assert last_json(capsys) == scores
    # Trees without labels have nothing to score against: an error, not NaN accuracies.
    (alone / "dev.txt").write_text("((the) (film))\n((is) (good))\n", encoding="utf-8")
    assert main([*argv, "--json"]) == 2
    assert f"{alone / 'dev.txt'}: no sentence has a label" in capsys.readouterr().err
    tree = "(3 (2 (2 the) (2 movie)) (3 (2 is) (3 good)))"
    assert main(["predict", "--checkpoint", str(run / "best.safetensors"), tree, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip())
    assert out["text"] == "the movie is good" and len(out["nodes"]) == 7
    assert sum(out["probabilities"]) == pytest.approx(1, abs=1e-3)


def test_a_binary3_model_predicts_negative_or_positive_as_it_is_scored(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, out = tmp_path / "run", tmp_path / "labels.jsonl"
    argv = ["train", "--data", str(demo_dir), "--task", "binary3", "--epochs", "1"]
    assert main([*argv, "--out", str(run), "--health", "off"]) == 0
    tree = "(3 (2 (2 the) (2 movie)) (3 (2 is) (3 good)))"
    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(run), tree, "--output", str(out)]) == 0
    assert capsys.readouterr().out == ""  # all of it went to the file
    (result,) = [json.loads(line) for line in out.read_text().splitlines()]
    labels = [result["label"]] + [node["label"] for node in result["nodes"]]
    assert set(labels) <= {0, 2}  # neutral never wins, as in `evaluate`
    p = result["probabilities"]
    assert result["label"] == (2 if p[2] > p[0] else 0)
    # The legend names the neutral class the probabilities hold, and how the label is chosen
    # (it said "0 negative, 2 positive" beside three probabilities whose largest was p[1]).
    assert main(["predict", "--checkpoint", str(run), tree]) == 0
    assert capsys.readouterr().err == (
        "labels (binary3): 0 negative, 1 neutral, 2 positive; the label is 0 or 2, whichever "
        "is more probable (neutral is trained on but never predicted: the task is scored as "
        "binary)\n"
    )


def test_train_resume_continues(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(["train", "--data", str(demo_dir), "--epochs", "1", "--out", str(run)]) == 0
    # A second new run into the same directory would replace its checkpoints: refused.
    kept = {p.name: p.read_bytes() for p in run.glob("*.safetensors")}
    capsys.readouterr()
    assert main(["train", "--data", str(demo_dir), "--epochs", "1", "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and f"--resume {run}" in err
    assert {p.name: p.read_bytes() for p in run.glob("*.safetensors")} == kept
    assert main(["train", "--resume", str(run), "--epochs", "2", "--json"]) == 0
    assert last_json(capsys)["epochs"] == 2


def test_a_run_whose_data_moved_resumes_with_data_given_again(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's config.toml names the data folder it began with; moved, the error says
    where it was and that --data gives where it is now, which then resumes."""
    data, run = tmp_path / "data", tmp_path / "run"
    shutil.copytree(demo_dir, data)
    assert main(["train", "--data", str(data), "--epochs", "1", "--out", str(run)]) == 0
    data.rename(tmp_path / "moved")
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--epochs", "2"]) == 2
    err = capsys.readouterr().err
    assert f"the run was trained on {data} (its config.toml)" in err
    assert "resume with --data set to where it is now" in err
    argv = ["train", "--resume", str(run), "--epochs", "2", "--data", str(tmp_path / "moved")]
    assert main([*argv, "--json"]) == 0
    assert last_json(capsys)["epochs"] == 2


def test_evaluate_seeds_reports_mean_and_std(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "evaluate",
        "--seeds",
        "2",
        "--data",
        str(demo_dir),
        "--epochs",
        "1",
        "--out",
        str(tmp_path / "s"),
        "--split",
        "dev",
        "--json",
    ]
    assert main(argv) == 0
    summary = last_json(capsys)
    assert len(summary["root_acc"]["values"]) == 2 and summary["root_acc"]["std"] >= 0
    assert (tmp_path / "s" / "seed-0" / "best.safetensors").is_file()
    assert (tmp_path / "s" / "seed-1" / "best.safetensors").is_file()
    assert summary["epochs"] == [1, 1]
    # One seed resumed further by hand: the same command again scores it as it is, and says so.
    assert main(["train", "--resume", str(tmp_path / "s" / "seed-1"), "--epochs", "2"]) == 0
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()  # under --json, what is said besides goes to stderr
    assert "NOTE: train.epochs is 1, but some seeds were trained further" in captured.err
    assert "mean +- std over 2 seeds, in % (each seed's line above: fractions)" in captured.err
    assert "seed 1: 2 epochs" in captured.err
    assert json.loads(captured.out)["epochs"] == [1, 2]  # stdout: the JSON object alone


def test_bad_input_gives_clear_errors(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--data", str(demo_dir), "--dropuot", "3"]) == 2
    assert "did you mean dropout" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "missing"),
                "--epochs",
                "1",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert "train.txt" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    for split in ("train", "dev", "test"):
        (bad / f"{split}.txt").write_text("(2 (2 a) (2 b))\n(9 x)\n")
    assert main(["train", "--data", str(bad), "--epochs", "1", "--out", str(tmp_path / "r")]) == 2
    assert "train.txt:2:2: label '9'" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", str(tmp_path / "nothing")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    assert main(["predict", "--checkpoint", str(tmp_path / "nothing"), "(2 (2 a) (2 b"]) == 2
    assert "unbalanced" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--model", "bow", "--out", "F/run"],
        ["train", "qa", "--out", "F/run"],
        ["evaluate", "--seeds", "2", "--out", "F/seeds"],
        ["predict", "--checkpoint", "F/run", "(2 (2 a) (2 b))"],
        ["predict", "qa", "--checkpoint", "run", "--input", "F/q.jsonl"],
        ["data", "demo", "--out", "F/demo"],
        ["data", "stats", "F/train.txt"],
        ["data", "download", "sst", "--dir", "F/data"],
        ["evaluate", "qa", "--gold", "F/dev.json", "--predictions", "p.json"],
        ["doctor", "--json", "F/sub/report.json", "--", "python", "x.py"],
    ],
)
def test_a_path_under_a_file_is_named_before_any_work(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each said "[Errno 20] Not a directory" (some only after reading the data), or worse,
    # named an internal temporary folder.
    file = tmp_path / "notes.txt"
    file.write_text("the user's\n")
    argv = [a.replace("F/", f"{file}/") for a in argv]
    assert main(argv) == 2
    path = next(a for a in argv if a.startswith(str(file)))
    assert capsys.readouterr().err.endswith(f"error: {path}: {file} is a file, not a folder\n")
    assert file.read_text() == "the user's\n"


def test_a_model_key_that_is_not_a_table_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text('model = "tree_lstm"\n')  # meant [model] name = "tree_lstm"
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"treeqa train: error: {config}: config.model: expected a section (table), got 'tree_lstm'\n"
    )


def test_an_unknown_model_in_a_config_names_the_file_the_key_and_the_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "lstm"\n')
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (
        f"treeqa train: error: {config}: model.name: expected one of "
        "bow | tree_lstm | childsum | tree_gru, got 'lstm'\n"
    )
    assert not (tmp_path / "r").exists()


def test_resume_with_another_out_is_refused_not_ignored(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    assert main(["train", "--resume", str(run), "--out", str(elsewhere)]) == 2
    assert capsys.readouterr().err == (
        f"treeqa train: error: --out {elsewhere} with --resume {run}: "
        f"a resumed run continues in {run}; drop --out\n"
    )
    assert not run.exists() and not elsewhere.exists()


def test_an_empty_split_is_an_error_not_a_nan_score(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev", "test"):
        (data / f"{split}.txt").write_text((demo_dir / f"{split}.txt").read_text())
    (data / "dev.txt").write_text("\n")
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err == f"treeqa train: error: {data / 'dev.txt'}: no trees in the dev split\n"


def test_serve_names_a_port_it_cannot_listen_on(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    run = tmp_path / "run"
    assert main(["train", "--data", str(demo_dir), "--epochs", "1", "--out", str(run)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["serve", str(run), "--port", "70000"])
    assert "argument --port: expected a port in 0-65535, got 70000" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(run), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"treeqa serve: error: cannot listen on 127.0.0.1:{port}: ")
    assert err.count("\n") == 1


def test_a_qa_config_given_to_train_sentiment_says_train_qa(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = Path(__file__).parents[2] / "configs" / "qanet_cpu_small.toml"
    argv = ["train", "sentiment", "--config", str(config), "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "a reading-comprehension (QANet) config or run: use `treeqa train qa`" in (
        capsys.readouterr().err
    )


def test_a_tilde_in_a_config_files_paths_is_the_home_folder(
    demo_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No shell reads a config file (or --key=value): ``path = "~/sst"`` was taken as a folder
    named ~ in the working directory."""
    home = tmp_path / "home"
    shutil.copytree(demo_dir, home / "sst")
    (home / "vectors.txt").write_text("good 0.1 0.2 0.3\nbad 0.3 0.2 0.1\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "home.toml"
    config.write_text('[data]\npath = "~/sst"\n', encoding="utf-8")
    run = tmp_path / "run"
    argv = ["train", "--config", str(config), "--vectors=~/vectors.txt", "--epochs", "1"]
    assert main([*argv, "--health", "off", "--out", str(run)]) == 0
    saved = (run / "config.toml").read_text(encoding="utf-8")
    assert f'path = "{home / "sst"}"' in saved and f'vectors = "{home / "vectors.txt"}"' in saved
    capsys.readouterr()
    assert main(["train", "qa", "--prepared=~/squad", "--out", str(tmp_path / "qa")]) == 2
    assert f"error: data.prepared: {home / 'squad'}: no such folder" in capsys.readouterr().err


def test_a_tilde_naming_no_home_folder_is_a_config_error(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``~nosuchuser/sst`` (a typo for ``~/sst``) ended in pathlib's RuntimeError traceback."""
    argv = ["train", f"--data.path={demo_dir}", "--vectors=~nosuchuser-treeqa/vectors.txt"]
    assert main([*argv, "--epochs", "1", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "data.vectors: '~nosuchuser-treeqa/vectors.txt': no home folder found for a user " in err
    assert "Traceback" not in err
    assert main(["train", "qa", "--prepared=~nosuchuser-treeqa/squad"]) == 2
    assert "data.prepared: '~nosuchuser-treeqa/squad': no home folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            {"WORLD_SIZE": "2"},
            "WORLD_SIZE=2 without RANK: torchrun sets both; unset WORLD_SIZE to run one process",
        ),
        ({"WORLD_SIZE": "four"}, "WORLD_SIZE='four': expected a whole number"),
        (
            {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": ""},
            "LOCAL_RANK='': expected a whole number",
        ),
    ],
)
def test_torchrun_variables_that_do_not_fit_are_named(
    env: dict[str, str],
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A WORLD_SIZE left in a job's environment gave a KeyError traceback, or int()'s message
    naming no variable."""
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run = tmp_path / "run"
    assert main(["train", "--epochs", "1", "--out", str(run)]) == 2
    assert capsys.readouterr().err == f"treeqa train: error: {said}\n"
    assert not run.exists()


def test_json_output_is_strict_json_with_null_for_scores_that_are_not_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from treeqa.cli.common import emit_json

    emit_json({"best_dev": float("-inf"), "scores": [0.5, float("nan")], "run_dir": "runs/1"})
    line = capsys.readouterr().out.strip()
    assert json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} is not JSON")) == {
        "best_dev": None,
        "scores": [0.5, None],
        "run_dir": "runs/1",
    }


def test_model_values_are_refused_before_any_data_is_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # They were checked when the model was built, after the data and vectors were read (a
    # bad --data hid them; a negative attention size crashed in torch).
    cases = [
        (["--model", "tree_gru", "--at_hid_dim", "-1"], "model.attention_dim: expected at least 0"),
        (["--model", "childsum", "--model.dropout=1.5"], "model.dropout: expected less than 1"),
        (["--optim", "adam", "--train.adam_betas=0.9,1.5"], "train.adam_betas: expected two"),
        (["--train.optim=sgd"], "train.optim: expected one of adagrad | adam, got 'sgd'"),
        (["--train.device=gpu"], "train.device 'gpu': expected auto, cpu, cuda or cuda:N"),
        (["--train.device=mps"], "train.device 'mps': expected auto, cpu, cuda or cuda:N"),
    ]
    for flags, said in cases:
        assert main(["train", "--data", "/no/such/dir", "--out", "/no/run", *flags]) == 2
        assert said in capsys.readouterr().err
    qa_cases = [
        ("--model.heads=3", "model.d_model 128 must be even and divisible by model.heads 3"),
        ("--model.model_kernel=4", "model.model_kernel: expected an odd size, got 4"),
        ("--model.survival=1.5", "model.survival: expected more than 0, at most 1, got 1.5"),
        ("--model.highway_layers=-1", "model.highway_layers: expected at least 0, got -1"),
    ]
    for flag, said in qa_cases:  # the even kernel crashed in the first step, the others ran
        assert main(["train", "qa", "--prepared", "/no/such/dir", flag]) == 2
        assert said in capsys.readouterr().err
    # A value of the wrong type is only that: no hint about a [model] section never given.
    assert main(["train", "--model", "tree_lstm", "--model.sparse_embedding=maybe"]) == 2
    assert capsys.readouterr().err == (
        "treeqa train: error: config.model.sparse_embedding: expected true or false, got 'maybe'\n"
    )


def test_amp_asked_for_on_a_cpu_says_it_does_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    said = "train.amp = bf16 does nothing on cpu: it trains in float32"
    argv = ["train", "--data", "/no/such/dir", "--train.device=cpu"]
    assert main([*argv, "--train.amp=bf16"]) == 2
    assert said in capsys.readouterr().out
    assert main(["train", "qa", "--prepared", "/no/such/dir", "--train.device=cpu"]) == 2
    assert said not in capsys.readouterr().out  # QANet's own bf16 default: not asked for


def test_amp_that_does_nothing_is_said_by_process_0_alone_under_torchrun(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    said = "train.amp = bf16 does nothing on cpu: it trains in float32"
    argv = ["train", "--data", "/no/such/dir", "--train.device=cpu", "--train.amp=bf16"]
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, lines in (("0", 1), ("1", 0)):
        monkeypatch.setenv("RANK", rank)
        assert main(argv) == 2
        assert capsys.readouterr().out.count(said) == lines


@pytest.mark.parametrize(
    "error",
    [
        ImportError("cannot import name 'reader' from 'treeqa.data.sst'"),
        ModuleNotFoundError("No module named 'treeqa.gone'", name="treeqa.gone"),
    ],
)
def test_an_import_bug_of_treeqas_own_keeps_its_traceback(
    error: ImportError, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was one error line, as if an extra were missing: the bug's place was lost.
    def broken(args: object) -> int:
        raise error

    monkeypatch.setattr(cli_data, "run_demo", broken)
    with pytest.raises(ImportError) as raised:
        main(["data", "demo", "--out", "x"])
    assert raised.value is error


def test_a_missing_extra_is_one_error_line_that_names_it(
    dep_dir: Path,
    demo_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Was: predict --text and serve on a dependency model ended in an ImportError traceback
    # where spaCy was not installed.
    data = tmp_path / "dep"
    shutil.copytree(dep_dir, data)
    (data / "meta.json").write_text(json.dumps({"pipeline": "a_pipeline_no_test_loaded"}))
    small = ["--model", "childsum", "--hidden_dim", "4", "--epochs", "1", "--health", "off"]
    assert main(["train", *small, "--data", str(data), "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "spacy", None)  # `import spacy` raises ImportError
    parse = ["--sst", str(demo_dir), "--out", str(tmp_path / "p"), "--pipeline", "a_pipeline"]
    for name, argv in (
        ("predict", ["predict", "--checkpoint", str(tmp_path / "r"), "--text", "Not bad."]),
        ("serve", ["serve", str(tmp_path / "r"), "--port", "0"]),
        ("data prepare sst-dependency", ["data", "prepare", "sst-dependency", *parse]),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"treeqa {name}: error: dependency parsing needs spaCy")
        assert "pip install 'treeqa[qa]'" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("test_file", ["missing", "empty"])
@pytest.mark.parametrize("kind", ["txt", "jsonl"])
def test_a_folder_without_test_trees_trains_and_evaluate_says_it_has_no_test_split(
    demo_dir: Path,
    dep_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    test_file: str,
) -> None:
    from treeqa.data import sst
    from treeqa.train import checkpoint as ckpt

    source = demo_dir if kind == "txt" else dep_dir
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev"):
        shutil.copy(source / f"{split}.{kind}", data)
    test = data / f"test.{kind}"
    if test_file == "empty":
        test.write_text("\n")
    run = tmp_path / "run"
    train = ["train", "--data", str(data), "--model", "bow", "--epochs", "1", "--health", "off"]
    # It was "test.txt: no such SST split file" (or "no trees in the test split"): a user with
    # train and dev alone could not train at all.
    assert main([*train, "--out", str(run)]) == 0
    assert f"note: {data} has no test trees" in capsys.readouterr().out
    words = {w for s in ("train", "dev") for t in sst.load_split(data, s) for w in t.tokens}
    assert set(ckpt.read_meta(run)["vocab"][2:]) == words
    assert main(["evaluate", "--checkpoint", str(run), "--split", "test"]) == 2
    err = capsys.readouterr().err
    if test_file == "missing":
        assert f"error: {test}: no such SST split file, so no test split; the folder holds " in err
        assert f"train.{kind}, dev.{kind} (expected train/dev/test.txt" in err
    else:
        assert f"error: {test}: no trees in the test split\n" in err
    # --seeds finds out before training its first seed.
    seeds = tmp_path / "seeds"
    assert main(["evaluate", "--seeds", "2", *train[1:], "--out", str(seeds)]) == 2
    assert f"error: {test}: no" in capsys.readouterr().err and not seeds.exists()
    assert main(["data", "stats", str(data)]) == 0  # an empty test file has 0 trees
    files = ("train", "dev", "test")[: 2 if test_file == "missing" else 3]
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()[::3]] == [
        str(data / f"{s}.{kind}") for s in files
    ]


def test_the_vocabulary_holds_the_test_words_when_there_is_a_test_split(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treeqa.data import sst
    from treeqa.train import checkpoint as ckpt

    run = tmp_path / "run"
    train = ["train", "--data", str(demo_dir), "--model", "bow", "--epochs", "1"]
    assert main([*train, "--health", "off", "--out", str(run)]) == 0
    assert "no test trees" not in capsys.readouterr().out
    words = {w for s in sst.SPLITS for t in sst.load_split(demo_dir, s) for w in t.tokens}
    assert set(ckpt.read_meta(run)["vocab"][2:]) == words  # as Tai et al. built SST's
