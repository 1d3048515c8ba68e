"""The run directory keeps what the user gave: its data named from anywhere, the user's own
config file, its metrics log whole across a resume; a bad log line is named."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from treeqa.cli.main import main
from treeqa.config import ConfigError
from treeqa.recipes.sentiment import resolve_config, train


def args(data: Path, *extra: str) -> list[str]:
    return ["train", "--data", str(data), "--epochs", "1", "--health", "off", *extra]


def test_a_run_resumes_and_evaluates_from_another_directory(
    demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "here"
    shutil.copytree(demo_dir, here / "sst")
    monkeypatch.chdir(here)
    assert main(args(Path("sst"), "--vectors", "", "--out", "run")) == 0
    assert f'path = "{here / "sst"}"' in (here / "run" / "config.toml").read_text()
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--resume", str(here / "run"), "--train.epochs=2"]) == 0
    assert main(["evaluate", "--checkpoint", str(here / "run"), "--split", "test"]) == 0


def test_a_moved_dataset_resumes_but_other_data_is_refused(demo_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(demo_dir, tmp_path / "sst")
    assert main(args(tmp_path / "sst", "--out", str(tmp_path / "run"))) == 0
    (tmp_path / "sst").rename(tmp_path / "moved")
    resume = ["train", "--resume", str(tmp_path / "run"), "--train.epochs=2"]
    assert main([*resume, "--data", str(tmp_path / "moved")]) == 0
    train_txt = tmp_path / "moved" / "train.txt"
    lines = train_txt.read_text().splitlines()
    train_txt.write_text("\n".join(lines[:20]) + "\n")  # other trees: another vocabulary
    with pytest.raises(ConfigError, match="another vocab than the data given now"):
        train(
            resolve_config({}, [("data", str(tmp_path / "moved")), ("epochs", "3")]),
            tmp_path / "run",
            resume_run=True,
        )


def test_the_users_config_file_in_out_is_kept(demo_dir: Path, tmp_path: Path) -> None:
    mine = tmp_path / "exp" / "config.toml"
    mine.parent.mkdir()
    text = "# my experiment\n[train]\nepochs = 1\nhealth = 'off'\n"
    mine.write_text(text)
    assert (
        main(["train", "--config", str(mine), "--data", str(demo_dir), "--out", str(mine.parent)])
        == 0
    )
    assert (mine.parent / "config.1.toml").read_text() == text
    assert "epochs = 1" in mine.read_text() and "# my experiment" not in mine.read_text()


def test_a_log_and_health_report_already_in_out_are_kept(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    out.mkdir()
    notes = '{"note": "my results from last week", "acc": 0.9}\nnot even JSON\n'
    (out / "metrics.jsonl").write_text(notes)
    (out / "health.json").write_text('{"mine": 1}')
    assert main(["train", "--data", str(demo_dir), "--epochs", "1", "--out", str(out)]) == 0
    assert (out / "metrics.1.jsonl").read_text() == notes
    assert (out / "health.1.json").read_text() == '{"mine": 1}'
    said = capsys.readouterr().out
    assert f"{out / 'metrics.jsonl'} held another log: kept as {out / 'metrics.1.jsonl'}" in said
    assert f"{out / 'health.json'} held an earlier report: kept as {out / 'health.1.json'}" in said
    logged = (out / "metrics.jsonl").read_text().splitlines()
    assert logged and all('"step"' in line or '"epoch"' in line for line in logged)


@pytest.mark.parametrize(
    "tree, message",
    [
        ("(2 (2 a) (2 b)", "train.txt:2:15: unbalanced '('"),
        ("(2 (2 a) (2 b) (2 c))", "train.txt:2: a node with 3 children; the binary Tree-LSTM"),
    ],
)
def test_a_run_that_fails_its_input_checks_names_the_line_and_leaves_no_folder(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], tree: str, message: str
) -> None:
    bad = tmp_path / "sst"
    shutil.copytree(demo_dir, bad)
    first = (bad / "train.txt").read_text().splitlines()[0]
    (bad / "train.txt").write_text(f"{first}\n{tree}\n")  # the bad tree on line 2
    assert main(args(bad, "--model", "tree_lstm", "--out", str(tmp_path / "run"))) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_wide_node_is_named_by_its_line_on_the_binary_task_and_in_evaluate(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: the binary task's view drops neutral-rooted sentences, and the message counted
    # trees in it ("train.txt, tree 2" for the tree on line 3); evaluate gave the model's message
    # with no file or line at all.
    bad = tmp_path / "sst"
    shutil.copytree(demo_dir, bad)
    wide = "(4 (3 good) (3 fine) (4 great))"
    (bad / "train.txt").write_text(f"(4 (3 good) (4 great))\n(2 (2 a) (2 b))\n{wide}\n")
    run = tmp_path / "run"
    assert main(args(bad, "--model", "tree_lstm", "--task", "binary", "--out", str(run))) == 2
    assert "train.txt:3: a node with 3 children; the binary Tree-LSTM" in capsys.readouterr().err
    shutil.copytree(demo_dir, bad, dirs_exist_ok=True)
    small = ["--model.embed_dim", "6", "--model.hidden_dim", "5"]
    assert main(args(bad, "--model", "tree_lstm", *small, "--out", str(run))) == 0
    test = (bad / "test.txt").read_text().splitlines()
    (bad / "test.txt").write_text("\n".join([*test[:3], wide, *test[3:]]) + "\n")
    capsys.readouterr()
    evaluate = ["evaluate", "--checkpoint", str(run), "--data", str(bad), "--split", "test"]
    assert main(evaluate) == 2
    assert "test.txt:4: a node with 3 children; the binary Tree-LSTM" in capsys.readouterr().err


def test_missing_second_vector_file_is_named_before_the_first_is_read(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "a.txt"
    first.write_text("film " + " ".join(["0.1"] * 4) + "\n")
    joined = f"{first}+{tmp_path / 'missing.txt'}"
    assert main(args(demo_dir, "--vectors", joined, "--out", str(tmp_path / "run"))) == 2
    err = capsys.readouterr().err
    assert f"data.vectors: {tmp_path / 'missing.txt'}: no such file" in err
    assert "vectors:" not in capsys.readouterr().out  # the first file was not read


@pytest.mark.parametrize(
    "line, message",
    [
        ("garbage", r"metrics\.jsonl:2: not a JSON line"),
        ("[1]", r"metrics\.jsonl:2: expected a JSON object"),
    ],
)
def test_a_bad_line_in_the_metrics_log_is_named(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    run = tmp_path / "run"
    assert main(args(demo_dir, "--out", str(run))) == 0
    log = run / "metrics.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text(lines[0] + line + "\n" + "".join(lines[1:]))
    assert main(["train", "--resume", str(run), "--train.epochs=2"]) == 2
    err = capsys.readouterr().err
    assert str(log) in err and re.search(message, err)
    assert log.read_text().splitlines()[1] == line  # the log is left as it was


def test_a_second_run_into_a_directory_in_training_is_refused(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treeqa.train import checkpoint as ckpt

    run = tmp_path / "run"
    with ckpt.run_lock(run):  # as a training still going on in another process holds it
        assert subprocess.run(
            [sys.executable, "-m", "treeqa", *args(demo_dir, "--out", str(run))],
            capture_output=True, text=True, timeout=300,
        ).stderr.strip().endswith(f"{run} is being trained by process {os.getpid()} right now: wait for it to end, or give another --out")  # fmt: skip
        assert sorted(p.name for p in run.iterdir()) == [ckpt.LOCK]  # nothing written
    assert main(args(demo_dir, "--out", str(run))) == 0  # free again
    assert not (run / ckpt.LOCK).exists()  # a run ended leaves its own files alone
    last = (run / ckpt.LAST).read_bytes()
    capsys.readouterr()
    with ckpt.run_lock(run):  # and a --resume of a run still training is refused likewise
        assert main(["train", "--resume", str(run), "--train.epochs=2"]) != 0
    assert f"{run} is being trained by process {os.getpid()} right now" in capsys.readouterr().err
    assert (run / ckpt.LAST).read_bytes() == last
    assert main(["train", "--resume", str(run), "--json"]) == 0
    captured = capsys.readouterr()  # under --json, said on stderr; stdout holds the JSON alone
    assert "already trained 1 epoch(s), train.epochs is 1: nothing more to train" in captured.err
    assert json.loads(captured.out)["epochs"] == 1


def test_a_run_that_opened_the_lock_as_a_failed_run_removed_its_folder_holds_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A new run that fails its input checks removes the folder it made. A second run into it
    # that had opened the lock file just before got the lock on the removed file, and went
    # on training into a folder that no longer was there, unguarded against a third run.
    import fcntl

    from treeqa.train import checkpoint as ckpt

    run = tmp_path / "run"
    first = ckpt.run_lock(run)
    first.__enter__()
    lock = fcntl.flock

    def first_fails_in_between(fd: int, how: int) -> None:
        monkeypatch.setattr(fcntl, "flock", lock)
        first.__exit__(ValueError, ValueError("bad data"), None)
        lock(fd, how)

    monkeypatch.setattr(fcntl, "flock", first_fails_in_between)
    with ckpt.run_lock(run):
        assert (run / ckpt.LOCK).read_text() == f"{os.getpid()}\n"
        with pytest.raises(FileExistsError, match=f"{run} is being trained by process"):
            with ckpt.run_lock(run):  # a third run
                pass


def test_a_lock_file_naming_a_live_process_that_holds_no_lock_is_free(tmp_path: Path) -> None:
    # The run that wrote it ended and its process id now names another process (here, the
    # first one): the system dropped its lock when it ended, and the lock, not the id, decides.
    from treeqa.train import checkpoint as ckpt

    run = tmp_path / "run"
    run.mkdir()
    (run / ckpt.LOCK).write_text("1\n")
    with ckpt.run_lock(run, resume=True):
        assert (run / ckpt.LOCK).read_text() == f"{os.getpid()}\n"


def test_a_run_stopped_before_any_evaluation_says_it_has_no_best_score() -> None:
    from treeqa.cli.common import best_line

    assert best_line("f1", {"best_epoch": -1, "best_dev": float("-inf")}, ".2f") == (
        "best dev f1: none (no dev evaluation finished)"
    )
    assert best_line("f1", {"best_epoch": 2, "best_dev": 71.234}, ".2f") == (
        "best dev f1: 71.23 (epoch 2)"
    )
    part_way = {"best_epoch": 1, "best_dev": 7.18, "best_step": 3, "best_partial": True}
    assert best_line("f1", part_way, ".2f") == "best dev f1: 7.18 (epoch 1, part-way: step 3)"


def test_a_resume_whose_config_was_emptied_says_so(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(args(demo_dir, "--out", str(run))) == 0
    (run / "config.toml").write_text("")
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--train.epochs=2"]) == 2
    assert f"{run / 'config.toml'} is empty, so the settings" in capsys.readouterr().err


def test_what_a_resume_cannot_change_is_refused_however_it_is_given(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    vectors = tmp_path / "v.txt"
    vectors.write_text("good 0.1 0.2\nbad 0.3 0.4\n")
    assert main(args(demo_dir, "--out", str(run), "--vectors", str(vectors))) == 0
    resume = ["train", "--resume", str(run), "--train.epochs=2"]
    # A learning rate edited into config.toml: the optimiser's state would keep the old one.
    config = run / "config.toml"
    saved = config.read_text()
    config.write_text(saved.replace("lr = 0.05", "lr = 0.5"))
    capsys.readouterr()
    assert main(resume) == 2
    assert "train.lr: 0.05 -> 0.5" in capsys.readouterr().err
    config.write_text(saved)
    # Other vectors, or none, would name vectors the run never started from; moved ones go.
    other = tmp_path / "w.txt"
    other.write_text("good 0.5 0.6\n")
    for given in (str(other), ""):
        assert main([*resume, "--vectors", given]) == 2
        assert "a resumed run keeps its own" in capsys.readouterr().err
    moved = tmp_path / "moved"
    moved.mkdir()
    vectors.rename(moved / "v.txt")
    assert main([*resume, "--vectors", str(moved / "v.txt")]) == 0
    # A deleted config.toml comes back from the last checkpoint, which records the settings.
    config.unlink()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--train.epochs=3"]) == 0
    assert "config.toml was missing: restored from last.safetensors" in capsys.readouterr().out
    assert 'vectors = "' + str(moved / "v.txt") in config.read_text()


def test_a_checkpoint_without_recorded_settings_is_checked_against_what_it_records(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Checkpoints of earlier versions keep model_config and train_config, not the whole
    # config: an lr edited into config.toml must not pass against config.toml itself.
    from treeqa.train import checkpoint as ckpt

    run = tmp_path / "run"
    assert main(args(demo_dir, "--out", str(run))) == 0
    last = ckpt.load(run, prefer=ckpt.LAST)
    meta = {k: v for k, v in last.meta.items() if k != "config"}
    ckpt.atomic_save(last.tensors, meta, run / ckpt.LAST)
    config = run / "config.toml"
    config.write_text(config.read_text().replace("lr = 0.05", "lr = 0.5"))
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--train.epochs=2"]) == 2
    assert "train.lr: 0.05 -> 0.5" in capsys.readouterr().err


def test_a_run_stopped_before_its_config_was_written_says_how_to_start_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").touch()  # all a run killed while it read its data leaves
    assert main(["train", "--resume", str(run)]) == 2
    assert "stopped before it wrote its config.toml" in capsys.readouterr().err
    assert main(["train", "qa", "--resume", str(tmp_path / "typo")]) == 2
    assert "--resume " + str(tmp_path / "typo") + ": no such run directory" in (
        capsys.readouterr().err
    )


def test_run_folders_that_cannot_be_are_refused_before_training(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    config = tmp_path / "exp.toml"
    config.write_text("[train]\nepochs = 20\n")
    cases = [
        (["--out", str(a_file)], f"--out {a_file} is a file; a run directory is a folder"),
        (["--resume", str(tmp_path), "--config", str(config)], "a resumed run keeps its own"),
        (["--name", ""], "name '': the run's folder under runs/ needs a plain name"),
        (["--name", "../elsewhere"], "name '../elsewhere': the run's folder under runs/"),
        (["--name", " "], "name ' ': the run's folder under runs/ needs a plain name"),
    ]
    for flags, said in cases:
        assert main(["train", "--data", str(demo_dir), "--epochs", "1", *flags]) == 2
        assert said in capsys.readouterr().err
    assert a_file.read_text() == "mine\n" and sorted(tmp_path.iterdir()) == [config, a_file]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_run_directory_that_cannot_be_made_is_named(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was the system's "[Errno 2] No such file or directory: '/proc/...'".
    out = Path("/proc/treeqa-run")  # no folder can be made in /proc
    assert main(args(demo_dir, "--out", str(out))) == 2
    assert capsys.readouterr().err.startswith(
        f"treeqa train: error: cannot create run directory {out}: "
    )


def test_training_needs_labelled_train_and_dev_trees(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "sst"
    shutil.copytree(demo_dir, data)
    dev = data / "dev.txt"
    dev.write_text(re.sub(r"\((\d) ", "(", dev.read_text()))  # labels stripped
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--epochs", "1", "--out", str(out)]) == 2
    said = capsys.readouterr().err
    assert (
        f"{dev}: no sentence has a label, so there is nothing to choose the best epoch by" in said
    )
    assert not out.exists()


@pytest.mark.parametrize("task", ["binary", "binary3"])
def test_a_binary_task_on_a_treebank_labelled_zero_and_one_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], task: str
) -> None:
    # Labelled 0 and 1 for negative and positive at the root, 2 within: both read as negative,
    # and the run trained a model that always says so, scoring 100% on its dev split.
    data = tmp_path / "sst"
    data.mkdir()
    (data / "train.txt").write_text("(0 (2 dull) (2 film))\n(1 (2 fine) (2 film))\n")
    (data / "dev.txt").write_text("(1 (2 good) (2 fun))\n")
    (data / "test.txt").write_text("(0 (2 bad) (2 fun))\n")
    out = tmp_path / "run"
    argv = ["train", "--data", str(data), "--task", task, "--epochs", "1", "--out", str(out)]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert f"{data / 'train.txt'}: every label is negative (0-1) or neutral under --task" in said
    assert "write a two-class treebank's classes as 0 and 4" in said and not out.exists()
    (data / "train.txt").write_text("(0 (2 dull) (2 film))\n(4 (2 fine) (2 film))\n")
    assert main([*argv, "--health", "off"]) == 0


@pytest.mark.parametrize("model", ["bow", "tree_lstm"])
def test_unlabelled_train_sentences_are_left_out_not_a_failed_step(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str
) -> None:
    # Labels are optional: a batch holding only unlabelled sentences gives no loss, which
    # stopped the run part-way ("a training batch produced no loss").
    data = tmp_path / "sst"
    shutil.copytree(demo_dir, data)
    lines = (demo_dir / "train.txt").read_text().splitlines()
    stripped = [re.sub(r"\((\d) ", "(", line) for line in lines[10:20]]
    (data / "train.txt").write_text("\n".join([*lines[:10], *stripped]) + "\n")
    out = tmp_path / "run"
    flags = ["--model", model, "--batch_size", "1", "--out", str(out)]
    assert main(args(data, *flags)) == 0
    said = capsys.readouterr().out
    assert "train: 10 of 20 sentences carry no fine label on any node: left out of training" in said
    assert (out / "best.safetensors").is_file()


def test_a_word_vector_size_other_than_the_vectors_is_refused_not_dropped(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = tmp_path / "v4.txt"
    vectors.write_text("film " + " ".join(["0.1"] * 4) + "\n")
    out = tmp_path / "run"
    given = ["--vectors", str(vectors), "--out", str(out), "--model", "tree_lstm"]
    assert main(args(demo_dir, *given, "--model.embed_dim=20")) == 2
    assert "model.embed_dim 20: the vectors in" in capsys.readouterr().err
    assert not out.exists()
    assert main(args(demo_dir, *given, "--model.embed_dim=4")) == 0  # the same size: fine


def test_a_resume_with_another_model_says_the_run_keeps_its_own(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(args(demo_dir, "--out", str(out))) == 0  # a bag of words
    assert main(["train", "--resume", str(out), "--model", "tree_lstm"]) == 2
    said = capsys.readouterr().err
    assert f"{out} trains a bow model, and a resumed run keeps its own" in said
    assert main(["train", "qa", "--config", str(out / "config.toml")]) == 2
    assert "this is a sentiment config or run (model 'bow'): use `treeqa train sentiment`" in (
        capsys.readouterr().err
    )


def test_a_mistyped_resume_is_an_error_not_a_new_run(tmp_path: Path) -> None:
    from treeqa.recipes import sentiment

    config = sentiment.resolve_config({}, [("epochs", "1"), ("health", "off")])
    with pytest.raises(FileNotFoundError, match="--resume .*nevr: no such run directory"):
        sentiment.train(config, tmp_path / "nevr", resume_run=True)
    assert not (tmp_path / "nevr").exists()


def test_a_resumed_run_that_had_stopped_early_says_what_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # More --epochs alone did nothing, without a word; patience is what holds it.
    from treeqa.train.callbacks import EarlyStopping
    from treeqa.train.loop import TrainState

    state = TrainState(epoch=5, best_epoch=2)
    EarlyStopping(patience=2).on_fit_start(state, None, None)  # type: ignore[arg-type]
    assert state.stop
    assert (
        "no better dev score for 3 epochs since the best (epoch 2), and train.patience is 2; "
        "raise --train.patience to train on" in capsys.readouterr().out
    )
    state = TrainState(epoch=5, best_epoch=2)
    EarlyStopping(patience=4).on_fit_start(state, None, None)  # type: ignore[arg-type]
    assert not state.stop and capsys.readouterr().out == ""


def test_under_torchrun_every_process_stops_early_and_process_0_alone_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from treeqa.train.callbacks import EarlyStopping, resume, say_if_done
    from treeqa.train.loop import TrainState

    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, said in (("0", True), ("1", False)):
        monkeypatch.setenv("RANK", rank)
        state = TrainState(epoch=5, best_epoch=2)
        EarlyStopping(patience=2).on_fit_start(state, None, None)  # type: ignore[arg-type]
        assert state.stop
        state = TrainState(epoch=5, best_epoch=2)
        EarlyStopping(patience=3).on_epoch_end(state, {})
        assert state.stop
        say_if_done(tmp_path, TrainState(epoch=4), 2)
        assert resume(tmp_path, None, None) is None  # type: ignore[arg-type]
        out = capsys.readouterr().out
        for line in ("stopped early before", "early stop:", "already trained", "no last"):
            assert (line in out) == said, (rank, line)


def test_evaluating_a_run_without_its_best_checkpoint_says_the_last_is_scored(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(args(demo_dir, "--out", str(run))) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(run)]) == 0
    assert "NOTE" not in capsys.readouterr().err
    (run / "best.safetensors").unlink()
    assert main(["evaluate", "--checkpoint", str(run)]) == 0
    err = capsys.readouterr().err
    assert f"{run} has no best.safetensors: scoring its last.safetensors instead" in err


def test_a_resume_with_fewer_epochs_than_a_run_stopped_mid_epoch_says_it_trains_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treeqa.train.callbacks import say_if_done
    from treeqa.train.loop import TrainState

    say_if_done(tmp_path, TrainState(epoch=4, epoch_step=40), 2)
    out = capsys.readouterr().out
    assert "already trained 4 epoch(s) and 40 batch(es) of epoch 5, train.epochs is 2: " in out
    assert "nothing more to train" in out
    say_if_done(tmp_path, TrainState(epoch=4, epoch_step=40), 5)  # goes on: nothing to say
    assert capsys.readouterr().out == ""


def test_a_resume_whose_config_does_not_read_says_the_checkpoint_can_restore_it(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(args(demo_dir, "--out", str(run))) == 0
    config = run / "config.toml"
    written = config.read_text()
    config.write_text(written[: len(written) // 2].rstrip() + "\nepoch")  # cut short
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--train.epochs=2"]) == 2
    err = capsys.readouterr().err
    assert f"{config}: " in err and f"{run / 'last.safetensors'} records the run's settings" in err
    assert config.read_text().endswith("\nepoch")  # the user's file is left as it is
    config.write_text("")
    assert main(["train", "--resume", str(run), "--train.epochs=2"]) == 2
    assert "remove it and --resume writes it again from last.safetensors" in capsys.readouterr().err
    config.unlink()
    assert main(["train", "--resume", str(run), "--train.epochs=2"]) == 0
    assert config.read_text().replace("epochs = 2", "epochs = 1") == written
