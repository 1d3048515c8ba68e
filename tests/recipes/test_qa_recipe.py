"""QA recipe on a tiny prepared SQuAD fixture: train -> save -> load -> the same predictions."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("spacy")

from treeqa.cli.main import main  # noqa: E402
from treeqa.data.collated import Collated  # noqa: E402
from treeqa.recipes import qa, sentiment  # noqa: E402
from treeqa.train import checkpoint as ckpt  # noqa: E402
from treeqa.train.distributed import World, shard  # noqa: E402

PARAGRAPHS = [
    (
        "Paris is the capital of France. The Seine flows through Paris. It has many museums.",
        [
            ("What is the capital of France?", "Paris", 0),
            ("What river flows through Paris?", "Seine", 36),
        ],
    ),
    (
        "The cat sat on the mat in 1999. The dog slept in the garden near the old oak tree.",
        [("Where did the dog sleep?", "in the garden", 46), ("When did the cat sit?", "1999", 26)],
    ),
    (
        "Water boils at 100 degrees. Ice melts at zero degrees. Steam is very hot indeed.",
        [
            ("At what temperature does water boil?", "100 degrees", 15),
            ("What melts at zero?", "Ice", 28),
        ],
    ),
]
TINY = [
    "--model.d_model=16",
    "--model.heads=2",
    "--model.char_dim=8",
    "--model.emb_convs=1",
    "--model.model_blocks=1",
    "--model.model_convs=1",
    "--train.batch_size=3",
    "--train.epochs=2",
    "--schedule.eval_every=3",
    "--train.optim=adam",
    "--train.lr=0.003",
    "--train.ema_decay=0.9",
    "--train.device=cpu",
    "--train.health=off",
]


def squad_json(version: str) -> dict:
    articles = []
    for n, (context, qas) in enumerate(PARAGRAPHS):
        items = []
        for k, (question, answer, start) in enumerate(qas):
            assert context[start : start + len(answer)] == answer
            items.append(
                {
                    "id": f"q{n}{k}",
                    "question": question,
                    "answers": [{"text": answer, "answer_start": start}],
                }
            )
        articles.append({"title": f"t{n}", "paragraphs": [{"context": context, "qas": items}]})
    return {"version": version, "data": articles}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from treeqa.data.squad import Tokenizer
    from treeqa.data.squad_prepare import prepare_squad

    root = tmp_path_factory.mktemp("squad")
    data = squad_json("1.1")
    for split in ("train", "dev"):
        (root / f"{split}.json").write_text(json.dumps(data), encoding="utf-8")
    tokens = {
        t
        for c, qas in PARAGRAPHS
        for text in [c, *(q for q, _, _ in qas)]
        for t in Tokenizer().tokenize(text)[0]
    }
    rng = np.random.default_rng(0)
    lines = [
        f"{t} " + " ".join(f"{x:.4f}" for x in rng.normal(size=6))
        for t in sorted(tokens)
        if t.isalpha()
    ]
    (root / "vectors.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = root / "prepared"
    prepare_squad(
        root / "train.json",
        root / "dev.json",
        root / "vectors.txt",
        out,
        vectors_cache=root / "cache",
    )
    return out


def test_train_save_load_same_predictions(prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = [
        "train",
        "qa",
        f"--prepared={prepared}",
        f"--out={out}",
        "--json",
        *TINY,
        "--train.epochs=1",
    ]
    assert main(argv) == 0
    best = ckpt.load(out)
    assert best.meta["task"] == "qa" and best.meta["kind"] == "best"
    assert "model.embedding.word_vectors" in best.tensors  # self-describing: vectors inside
    last = ckpt.load(out, prefer=ckpt.LAST)
    assert any(k.startswith("ema.") for k in last.tensors)
    # One evaluation, so best and last are of the same step: best holds the EMA shadows as its
    # model weights, last holds the raw weights plus the shadows as ema.* (for resuming).
    w = "model.pointer.start.weight"
    assert not np.allclose(best.tensors[w].numpy(), last.tensors[w].numpy())
    np.testing.assert_allclose(
        best.tensors[w].numpy(), last.tensors["ema.pointer.start.weight"].numpy()
    )

    # Scores recomputed from the loaded checkpoint equal those logged during training.
    scores = qa.evaluate(out, prepared, "dev")
    assert scores["f1"] == pytest.approx(best.meta["metrics"]["f1"])
    assert scores["questions"] == 6

    # Raw text in (tokenised at prediction time) gives the answers of the prepared arrays.
    loaded = qa.load_model(out)
    split = qa.PreparedSplit(prepared, "dev")
    from_arrays = qa.predict_rows(loaded.model, split, None, 4, 0.0)
    pairs = [(c, q) for c, qas in PARAGRAPHS for q, _, _ in qas]
    ids = [f"q{n}{k}" for n in range(3) for k in range(2)]
    results = qa.predict(loaded, pairs)
    for (context, _), qid, r in zip(pairs, ids, results, strict=True):
        assert r["answer"] == from_arrays[qid][0]
        assert context[r["start"] : r["end"]] == r["answer"]
        assert r["score"] == pytest.approx(np.exp(from_arrays[qid][1]), rel=1e-4)
    # What the library takes, said before any work (a negative batch size answered nothing).
    assert qa.predict(loaded, []) == []
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"batch_size {bad}: give a positive number"):
            qa.predict(loaded, pairs, batch_size=bad)
    with pytest.raises(TypeError, match="example 0: a dict, not a"):
        qa.predict(loaded, [{"context": "a", "question": "b"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"example 1: the context is not valid text .*U\+D800"):
        qa.predict(loaded, [pairs[0], ("Paris \ud800", "Where?")])
    # A model a loop left in training mode answers as in eval mode, and stays in training mode.
    loaded.model.train()
    assert qa.predict(loaded, pairs) == results
    assert loaded.model.training
    with pytest.raises(TypeError, match="examples is a generator; give a list of"):
        qa.predict(loaded, (p for p in pairs))  # type: ignore[arg-type]
    other = sentiment.Loaded(loaded.model, loaded.words, "fine", {})
    with pytest.raises(TypeError, match=r"recipes\.sentiment\.Loaded, not a QA model: give"):
        qa.predict(other, pairs)  # type: ignore[arg-type]


def test_a_split_prepared_apart_is_renumbered_into_the_model_vocabulary(
    prepared: Path, tmp_path: Path
) -> None:
    from treeqa.data.squad_prepare import prepare_squad

    out = tmp_path / "run"
    assert main(["train", "qa", f"--prepared={prepared}", f"--out={out}", *TINY]) == 0
    # Prepared from another training file: the same dev questions, their words numbered otherwise.
    data = squad_json("1.1")
    other = {**data, "data": data["data"][2:]}
    (tmp_path / "train.json").write_text(json.dumps(other), encoding="utf-8")
    apart = tmp_path / "apart"
    prepare_squad(
        tmp_path / "train.json",
        prepared.parent / "dev.json",
        prepared.parent / "vectors.txt",
        apart,
        vectors_cache=tmp_path / "cache",
    )
    split = qa.PreparedSplit(apart, "dev")
    assert split.word_vocab() != qa.PreparedSplit(prepared, "dev").word_vocab()
    same = qa.evaluate(out, prepared, "dev", tmp_path / "same.json")
    renumbered = qa.evaluate(out, apart, "dev", tmp_path / "apart.json")
    assert json.loads((tmp_path / "apart.json").read_text()) == json.loads(
        (tmp_path / "same.json").read_text()
    )
    assert renumbered == {**same, "words_unknown_to_model": 0.0}


def test_predict_cli_text_and_jsonl(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert (
        main(["train", "qa", f"--prepared={prepared}", f"--out={out}", *TINY, "--train.epochs=1"])
        == 0
    )
    capsys.readouterr()
    context, question = PARAGRAPHS[0][0], PARAGRAPHS[0][1][0][0]
    assert (
        main(
            [
                "predict",
                "qa",
                "--checkpoint",
                str(out),
                "--context",
                context,
                "--question",
                question,
            ]
        )
        == 0
    )
    line = capsys.readouterr().out.strip()
    assert "score" in line
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(
        "\n".join(
            json.dumps({"id": n, "context": context, "question": question}) for n in ("a", "b")
        )
        + "\n\n"  # a blank line is skipped; the ids say which answer is whose
    )
    assert (
        main(["predict", "qa", "--checkpoint", str(out), "--input", str(src), "--output", str(dst)])
        == 0
    )
    answers = [json.loads(x) for x in dst.read_text().splitlines()]
    assert [a.pop("id") for a in answers] == ["a", "b"] and answers[0] == answers[1]
    assert answers[0]["question"] == question and "context" not in answers[0]
    assert answers[0]["answer"] in line
    flags = ["--checkpoint", str(out), "--context", context, "--question", question]
    assert main(["predict", *flags]) == 2
    assert "are for reading comprehension: treeqa predict qa" in capsys.readouterr().err

    # `evaluate qa --checkpoint`: every dev question answered and scored; the answers it writes
    # score the same through `evaluate qa --predictions`.
    predictions, gold = tmp_path / "pred.json", tmp_path / "gold.json"
    argv = ["evaluate", "qa", "--checkpoint", str(out), "--prepared", str(prepared)]
    assert main([*argv, "--write-predictions", str(predictions), "--json"]) == 0
    from_checkpoint = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert from_checkpoint["questions"] == 6 and from_checkpoint["total"] == 6
    assert isinstance(from_checkpoint["questions"], int)
    assert isinstance(from_checkpoint["total"], int)  # a count, as in the file mode
    assert len(json.loads(predictions.read_text())) == 6
    gold.write_text(json.dumps(qa.PreparedSplit(prepared, "dev").gold()))
    assert (
        main(["evaluate", "qa", "--gold", str(gold), "--predictions", str(predictions), "--json"])
        == 0
    )
    from_file = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert from_file["f1"] == pytest.approx(from_checkpoint["f1"])
    assert from_file["exact_match"] == pytest.approx(from_checkpoint["exact_match"])
    with pytest.raises(SystemExit) as stop:  # data prepare squad writes train and dev only
        main([*argv, "--split", "test"])
    assert stop.value.code == 2 and "invalid choice: 'test'" in capsys.readouterr().err

    # The run's and the prepared data's own files are never written over by the answers.
    kept = {p: p.read_bytes() for p in [*out.iterdir(), prepared / "dev" / "gold.json"]}
    for target, said in (
        (out / "best.safetensors", "is a checkpoint of the model of the run"),
        (out / "config.toml", "is a file of the run"),
        (out / "metrics.jsonl", "is a file of the run"),
        (prepared / "dev" / "gold.json", "is a file of the prepared data"),
    ):
        assert main([*argv, "--write-predictions", str(target)]) == 2
        assert f"--write-predictions {target} {said}" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in kept} == kept
    assert main([*argv, "--write-predictions", str(out / "dev-predictions.json")]) == 0


def test_resolve_config_rejects_unknown_keys() -> None:
    from treeqa.config import ConfigError

    with pytest.raises(ConfigError):
        qa.resolve_config({}, [("model.d_modle", "8")])
    config = qa.resolve_config({}, [("prepared", "x"), ("threshold", "1.5")])
    assert config.data.prepared == "x" and config.schedule.threshold == 1.5
    assert config.train.ema_decay == 0.9999  # the paper's


def test_a_word_dim_given_against_the_prepared_vectors_is_refused(prepared: Path) -> None:
    from treeqa.config import ConfigError
    from treeqa.data.squad_prepared import load_meta

    width = int(load_meta(prepared)["vocab"]["vector_dim"])
    with pytest.raises(ConfigError, match=f"model.word_dim {width + 1}: the vectors prepared in"):
        qa.resolve_config({}, [("prepared", str(prepared)), ("word_dim", str(width + 1))])
    given = qa.resolve_config({}, [("prepared", str(prepared)), ("model.word_dim", str(width))])
    assert given.model.word_dim == width


@pytest.mark.parametrize("name", ["qanet_paper", "qanet_cpu_small"])
def test_the_shipped_configs_take_the_word_dim_of_the_prepared_vectors(
    name: str, prepared: Path
) -> None:
    from treeqa.config import load_toml
    from treeqa.data.squad_prepared import load_meta

    raw = load_toml(Path(__file__).resolve().parents[2] / "configs" / f"{name}.toml")
    qa.resolve_config(raw, [("prepared", str(prepared))])  # no word_dim against them
    width = int(load_meta(prepared)["vocab"]["vector_dim"])
    assert width != 300  # the fixture's vectors are not the paper's width


def test_data_and_schedule_values_out_of_range_name_the_field() -> None:
    from treeqa.config import ConfigError

    cases = {
        "schedule.eval_every": ("-1", "schedule.eval_every: expected at least 0, got -1"),
        "schedule.budget_minutes": ("-5", "schedule.budget_minutes: expected at least 0, got -5.0"),
        "data.dev_subset": ("-3", "data.dev_subset: expected at least 0, got -3"),
        "schedule.threshold": ("nan", "schedule.threshold: expected a number, got nan"),
        "data.eval_batch_size": ("0", "data.eval_batch_size: expected at least 1, got 0"),
        "data.pad_multiple": ("0", "data.pad_multiple: expected at least 1, got 0"),
    }
    for key, (value, message) in cases.items():
        with pytest.raises(ConfigError) as err:
            qa.resolve_config({}, [(key, value)])
        assert str(err.value) == message


def test_a_run_directory_with_ema_decay_under_schedule_still_resolves() -> None:
    # Earlier versions wrote the EMA decay under [schedule]; resuming such a run reads it.
    config = qa.resolve_config({"schedule": {"ema_decay": 0.99, "eval_every": 7}}, [])
    assert config.train.ema_decay == 0.99 and config.schedule.eval_every == 7


def test_squad2_no_answer_training_and_thresholded_decoding(tmp_path: Path) -> None:
    from treeqa.data.squad_prepare import prepare_squad

    data = squad_json("v2.0")
    for article in data["data"]:
        for qa_ in article["paragraphs"][0]["qas"]:
            qa_["is_impossible"] = False
    impossible = {
        "id": "none0",
        "question": "What is the capital of Spain?",
        "answers": [],
        "is_impossible": True,
    }
    data["data"][0]["paragraphs"][0]["qas"].append(impossible)
    for split in ("train", "dev"):
        (tmp_path / f"{split}.json").write_text(json.dumps(data), encoding="utf-8")
    words = {
        w.strip(".?")
        for c, qas in PARAGRAPHS
        for w in " ".join([c, *(q for q, _, _ in qas)]).split()
    }
    rng = np.random.default_rng(1)
    lines = [
        f"{w} " + " ".join(f"{x:.4f}" for x in rng.normal(size=6))
        for w in sorted(words)
        if w.isalpha()
    ]
    (tmp_path / "vectors.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    prepared = tmp_path / "prepared"
    prepare_squad(
        tmp_path / "train.json", tmp_path / "dev.json", tmp_path / "vectors.txt", prepared
    )
    out = tmp_path / "run"
    # A threshold far below zero: the no-answer slot always wins, whatever was learned.
    argv = [
        "train",
        "qa",
        f"--prepared={prepared}",
        f"--out={out}",
        *TINY,
        "--train.epochs=1",
        "--threshold=-1e6",
    ]
    assert main(argv) == 0
    loaded = qa.load_model(out)
    assert loaded.model.config.no_answer  # switched on by the v2.0 data
    scores = qa.evaluate(out, prepared, "dev")
    assert (
        scores["no_ans_total"] == 1
        and scores["no_ans_exact"] == 100.0
        and scores["has_ans_f1"] == 0.0
    )
    # The official best-threshold search over the no-answer margins: never below the score at
    # the threshold used, and its threshold reproduces it.
    assert scores["best_f1"] >= scores["f1"] and scores["best_exact"] >= scores["exact_match"]
    split = qa.PreparedSplit(prepared, "dev")
    again = qa.evaluate_model(loaded.model, split, None, 4, scores["best_f1_thresh"])
    assert again["f1"] == pytest.approx(scores["best_f1"])
    [result] = qa.predict(loaded, [(PARAGRAPHS[0][0], "What is the capital of Spain?")])
    assert result["answer"] == "" and result["start"] == -1
    # Raw text in: the margin and best span the prepared arrays give the same question.
    from_arrays = qa.predict_rows(loaded.model, split, None, 4, math.inf)["none0"]
    assert result["no_answer_margin"] == pytest.approx(from_arrays.no_answer_margin, abs=1e-4)
    assert result["best_span"] == from_arrays.span and result["best_span"]


def test_resume_continues_steps_and_ema(prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert (
        main(["train", "qa", f"--prepared={prepared}", f"--out={out}", *TINY, "--train.epochs=1"])
        == 0
    )
    first = ckpt.load(out, prefer=ckpt.LAST)
    # What it was made with: the prepared folder's meta.json (its sources' SHA-256s inside).
    assert [f["name"] for f in first.meta["made_with"]["files"]] == ["meta.json"]
    assert main(["train", "qa", "--resume", str(out), "--train.epochs=2"]) == 0
    last = ckpt.load(out, prefer=ckpt.LAST)
    assert first.meta["step"] == 3 and last.meta["step"] == 6
    w = "pointer.start.weight"
    # The shadows moved on from the saved ones rather than restarting from the raw weights.
    assert not np.allclose(first.tensors["ema." + w].numpy(), last.tensors["ema." + w].numpy())


def test_a_run_its_time_budget_stopped_says_so_and_resumes(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A budget spent after the first step stops the run there: stderr says where and how to
    go on, --json says "budget_stopped"; --resume (with a budget of its own: none) finishes it."""
    out = tmp_path / "run"
    args = ["train", "qa", f"--prepared={prepared}", f"--out={out}", *TINY, "--json"]
    assert main([*args, "--schedule.budget_minutes=1e-9"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["budget_stopped"] is True and summary["steps"] == 1
    assert "the time budget (1e-09 minutes) stopped the run after step 1 (epoch 1, batch 1)" in (
        captured.err
    )
    assert f"--resume {out} goes on from there" in captured.err
    assert main(["train", "qa", "--resume", str(out), "--schedule.budget_minutes=0", "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["budget_stopped"] is False and summary["steps"] == 6
    assert "time budget" not in captured.err
    assert f"{out}: resuming after step 1 (epoch 1, batch 1)" in captured.err


def test_a_resumed_run_may_pad_its_batches_and_one_from_before_the_setting_resumes(
    prepared: Path, tmp_path: Path
) -> None:
    """``data.pad_multiple`` is how batches are laid out, not what is learned: a run may go on
    padded (to train on through CUDA graphs). A run directory written before the setting
    existed has no such key in its config.toml nor in its checkpoint's settings."""
    out = tmp_path / "run"
    flags = [f"--prepared={prepared}", f"--out={out}", *TINY, "--train.epochs=1"]
    assert main(["train", "qa", *flags]) == 0
    assert (
        main(["train", "qa", "--resume", str(out), "--train.epochs=2", "--data.pad_multiple=16"])
        == 0
    )
    last = ckpt.load(out, prefer=ckpt.LAST)
    assert last.meta["step"] == 6
    # As written before the setting: without data.pad_multiple in either record.
    text = (out / "config.toml").read_text()
    assert "pad_multiple" in text
    (out / "config.toml").write_text(
        "\n".join(line for line in text.splitlines() if "pad_multiple" not in line) + "\n"
    )
    meta_config = last.meta["config"]
    assert isinstance(meta_config, str) and "pad_multiple" in meta_config
    last.meta["config"] = "\n".join(
        line for line in meta_config.splitlines() if "pad_multiple" not in line
    )
    ckpt.atomic_save(last.tensors, last.meta, out / ckpt.LAST)
    assert main(["train", "qa", "--resume", str(out), "--train.epochs=3"]) == 0
    assert ckpt.load(out, prefer=ckpt.LAST).meta["step"] == 9


def test_resume_on_a_folder_prepared_again_with_other_limits_is_refused(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only the vocabularies were compared: data prepared again with other limits (whose
    # vocabularies came out the same) was trained on, silently.
    data = Path(shutil.copytree(prepared, tmp_path / "prepared"))
    out = tmp_path / "run"
    assert main(["train", "qa", f"--prepared={data}", f"--out={out}", *TINY]) == 0
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    meta["limits"]["answer"] += 1
    (data / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    capsys.readouterr()
    assert main(["train", "qa", "--resume", str(out), "--train.epochs=2"]) == 2
    assert "was trained on data with another limits" in capsys.readouterr().err


def test_missing_prepared_data_names_the_flag_and_the_config_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was "runs/squad_v1 is not a prepared SQuAD directory (no meta.json)": neither the flag
    # nor the config key that sets it, nor that this was the default, none being given.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("", encoding="utf-8")
    fix = "give the folder `treeqa data prepare squad` wrote with --prepared DIR, or as "
    cases = {
        (): f"data.prepared: {tmp_path / 'runs' / 'squad_v1'}: no such folder (the default, as "
        "none was given); " + fix,
        ("--prepared=nowhere",): f"data.prepared: {tmp_path / 'nowhere'}: no such folder; ",
        ("--data.prepared=empty",): f"{tmp_path / 'empty'}: not a prepared SQuAD folder (no meta",
        ("--prepared=file",): f"data.prepared: {tmp_path / 'file'}: a file, not a folder; " + fix,
    }
    for given, said in cases.items():
        assert main(["train", "qa", *given, "--out=run", *TINY]) == 2
        err = capsys.readouterr().err
        assert said in err and "data.prepared in the config" in err, err
        assert len(err.splitlines()) == 1


def test_data_tokenised_by_another_spacy_trains_and_scores_with_a_warning(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = Path(shutil.copytree(prepared, tmp_path / "prepared"))
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    meta["tokenizer"]["spacy_version"] = "2.3.9"
    (data / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    out = tmp_path / "run"
    capsys.readouterr()
    argv = ["train", "qa", f"--prepared={data}", f"--out={out}", *TINY, "--train.epochs=1"]
    assert main(argv) == 0
    assert main(["evaluate", "qa", "--checkpoint", str(out), "--prepared", str(data)]) == 0
    said = capsys.readouterr()
    warned = [x for x in (said.out + said.err).splitlines() if "spaCy 2.3.9" in x]
    assert len(warned) == 2  # one line at training, one at scoring
    assert all(x.startswith(f"warning: {data} was tokenised with spaCy 2.3.9") for x in warned)


def test_checkpoint_every_writes_the_last_checkpoint_between_evaluations(
    prepared: Path, tmp_path: Path
) -> None:
    from treeqa.config import parse_overrides
    from treeqa.train.loop import Callback

    class KilledAt4(Callback):  # after the checkpointer, like a kill between steps
        def on_step_end(self, state, output, batch) -> None:
            if state.step == 4:
                raise KeyboardInterrupt

    overrides = [f"--prepared={prepared}", *TINY, "--train.checkpoint_every=2"]
    config = qa.resolve_config({}, parse_overrides(overrides))
    with pytest.raises(KeyboardInterrupt):
        qa.train(config, tmp_path / "run", extra_callbacks=[KilledAt4()])
    # Evaluations come every 3 steps: without checkpoint_every the last one would be step 3's.
    assert ckpt.load(tmp_path / "run", prefer=ckpt.LAST).meta["state"]["step"] == 4


def test_training_runs_under_the_health_monitor(prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    tiny = [a for a in TINY if not a.startswith("--train.health")]
    argv = ["train", "qa", f"--prepared={prepared}", f"--out={out}", *tiny, "--train.health=on"]
    assert main(argv) == 0
    report = json.loads((out / "health.json").read_text())
    assert not [f for f in report["findings"] if f["severity"] == "error"]


def test_a_metric_v1_scoring_does_not_give_is_refused_before_training(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "qa", f"--prepared={prepared}", f"--out={tmp_path / 'run'}", *TINY]
    assert main([*argv, "--train.metric=best_f1"]) == 2
    assert "'best_f1' is not a dev metric; choose one of exact_match, f1" in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_eval_every_counts_optimiser_steps_under_torchrun(prepared: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    command += ["2", "-m", "treeqa", "train", "qa", f"--prepared={prepared}", *TINY]
    out = tmp_path / "run"
    command += ["--schedule.eval_every=3", "--train.epochs=1", f"--out={out}", "--json"]
    run = subprocess.run(
        command, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # 3 steps, each one batch per process: before, 3 batches were shared out and one dropped.
    assert json.loads(run.stdout.splitlines()[-1])["steps"] == 3


def test_v1_train_with_same_article_negatives_trains_the_no_answer_slot(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from treeqa.data.squad_features import Limits
    from treeqa.data.squad_prepare import prepare_squad

    data = squad_json("1.1")
    questions = sum(len(qas) for _, qas in PARAGRAPHS)
    one_article = {**data, "data": [{"title": "t", "paragraphs": [
        p for a in data["data"] for p in a["paragraphs"]
    ]}]}  # fmt: skip
    (tmp_path / "train.json").write_text(json.dumps(one_article), encoding="utf-8")
    negatives = tmp_path / "negatives"
    meta = prepare_squad(
        tmp_path / "train.json",
        prepared.parent / "dev.json",
        prepared.parent / "vectors.txt",
        negatives,
        negatives="same_article",
        negative_fraction=1.0,
        vectors_cache=tmp_path / "cache",
        limits=Limits(question=6),  # leaves out the longer questions
    )
    made = meta["splits"]["train"]["unanswerable_examples"]
    assert meta["version"] == "v1.1" and made > 0
    out = tmp_path / "run"
    assert main(["train", "qa", f"--prepared={negatives}", f"--out={out}", *TINY]) == 0
    # Without the slot the loss would skip those rows: they would train nothing.
    assert ckpt.load(out).meta["model_config"]["no_answer"] is True
    # Scored on its training split: over the file's questions that it holds, neither those
    # the limits left out (as unanswered) nor the made ones (as unknown ids).
    scores = qa.evaluate(out, negatives, "train")
    split = qa.PreparedSplit(negatives, "train")
    held = len(split) - made
    assert 0 < held < questions
    assert (scores["questions"], scores["total"], scores["missing"]) == (held, held, 0)
    assert (scores["left_out"], scores["not_in_file"]) == (questions - held, made)
    argv = ["evaluate", "qa", "--checkpoint", str(out), "--prepared", str(negatives)]
    assert main([*argv, "--split", "train"]) == 0
    said = capsys.readouterr()
    assert f"on {negatives} train ({held} questions)" in said.out
    assert f"{questions - held} past its length limits are not in it" in said.err
    assert f"its {made} unanswerable questions made by --negatives are not scored" in said.err


def test_the_best_threshold_reproduces_its_score_when_abstaining_everywhere_wins() -> None:
    gold = {
        "version": "v2.0",
        "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": [
            {"id": "n1", "question": "?", "answers": [], "is_impossible": True},
            {"id": "h1", "question": "?", "answers": [{"text": "x", "answer_start": 0}]},
        ]}]}],
    }  # fmt: skip
    # Both spans are wrong, so abstaining everywhere is best; the margins are negative log-odds.
    answers = {q: qa.Answer("wrong", -1.0, "wrong", m) for q, m in (("n1", -2.0), ("h1", -1.0))}
    scores = qa.official_scores(gold, answers)
    assert scores["best_f1"] == 50.0
    # The threshold given is one that, used as schedule.threshold, abstains on both.
    threshold = scores["best_f1_thresh"]
    assert all(a.no_answer_margin > threshold for a in answers.values())


def test_a_training_stream_over_no_examples_is_an_error_not_a_hang() -> None:
    class NoExamples:  # a prepared split that yields no batch (the reader refuses one today)
        def batches(self, *args: object, **kwargs: object) -> Collated[object]:
            return Collated([], lambda group: group)

    stream = qa.StepStream(NoExamples(), batch_size=4, per_epoch=3, seed=0, bucket=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no examples"):
        next(iter(stream(0)))


def test_each_process_collates_only_its_share_of_a_training_stream(
    prepared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    split = qa.PreparedSplit(prepared, "train")
    seed, size, per_epoch = 1, 2, 5  # an odd epoch: its last batch is an incomplete round
    passes = -(-4 * per_epoch // -(-len(split) // size)) + 1
    stream = [  # the endless stream of batches, cut into epochs (every one collated)
        b for p in range(passes) for b in split.batches(size, True, seed * 100_003 + p)
    ]
    epochs = [stream[e * per_epoch : (e + 1) * per_epoch] for e in range(4)]
    collated: list[np.ndarray] = []
    batch = qa.PreparedSplit.batch

    def counting(self: qa.PreparedSplit, rows: np.ndarray, pad_multiple: int = 1) -> qa.QABatch:
        collated.append(rows)
        return batch(self, rows, pad_multiple)

    monkeypatch.setattr(qa.PreparedSplit, "batch", counting)
    for rank in (0, 1):
        steps = qa.StepStream(split, size, per_epoch, seed, bucket=True)
        for epoch in (0, 1, 3):  # a resumed run starts part-way through the stream
            collated.clear()
            mine = list(shard(steps(epoch), World(rank, 2)))
            assert len(collated) == len(mine) == 2
            expected = list(shard(iter(epochs[epoch]), World(rank, 2)))
            for got, want in zip(mine, expected, strict=True):
                for f in dataclasses.fields(qa.QABatch):
                    assert torch.equal(getattr(got, f.name), getattr(want, f.name)), f.name


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").open()) if "loss" in r]


def test_training_through_torch_compile_learns_what_eager_training_does(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--train.compile`` compiles the model in place (Dynamo's capture, run by its eager
    backend here: inductor's code generation is the slow test's): the same losses, and a
    checkpoint under the model's own parameter names. (Without stochastic depth: compiled, a
    dropped sublayer is computed and multiplied by 0, its dropout drawn all the same.)"""
    from treeqa.train import loop

    monkeypatch.setattr(loop, "COMPILE_BACKEND", "eager")
    plain, compiled = tmp_path / "plain", tmp_path / "compiled"
    flags = [f"--prepared={prepared}", *TINY, "--train.log_every=1", "--model.survival=1"]
    assert main(["train", "qa", *flags, f"--out={plain}"]) == 0
    assert main(["train", "qa", *flags, f"--out={compiled}", "--train.compile=default"]) == 0
    assert _losses(compiled) == pytest.approx(_losses(plain), rel=1e-5) and _losses(plain)
    keys = set(ckpt.load(plain).tensors)
    assert set(ckpt.load(compiled).tensors) == keys
    # How a run is run, not what it learns: a resumed run may compile, or stop compiling.
    more = ["--train.epochs=3", "--train.compile=off"]
    assert main(["train", "qa", f"--resume={compiled}", *more]) == 0


def test_batches_padded_to_fixed_lengths_train_and_score_as_unpadded_ones(
    prepared: Path, tmp_path: Path
) -> None:
    """``--data.pad_multiple``: the same losses and dev scores (without dropout, whose masks
    follow the shapes drawn), every batch padded to a multiple of the length."""
    plain, padded = tmp_path / "plain", tmp_path / "padded"
    flags = [f"--prepared={prepared}", *TINY, "--train.log_every=1", "--model.survival=1"]
    flags += ["--model.dropout=0", "--model.char_dropout=0", "--model.attention_dropout=0"]
    assert main(["train", "qa", *flags, f"--out={plain}"]) == 0
    assert main(["train", "qa", *flags, f"--out={padded}", "--data.pad_multiple=16"]) == 0
    assert _losses(padded) == pytest.approx(_losses(plain), rel=1e-5) and _losses(plain)

    def dev_f1(run: Path) -> list[float]:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [r["dev_f1"] for r in rows if "dev_f1" in r]

    assert dev_f1(padded) == pytest.approx(dev_f1(plain), abs=1e-9) and dev_f1(plain)
    from treeqa.data.squad_prepared import PreparedSplit

    split = PreparedSplit(prepared, "train")
    batches = list(qa.StepStream(split, 2, 4, 0, True, 16)(0))
    assert all(b.context_words.shape[1] % 16 == 0 for b in batches)
    assert any(int(split.context_lengths[b.index].max()) % 16 for b in batches)  # (padded)


def test_cuda_graphs_over_unpadded_batches_get_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    graphs = [("compile", "reduce-overhead"), ("device", "cuda")]
    monkeypatch.setattr(qa, "resolve_device", lambda name: torch.device(name))
    note = qa.graphs_without_fixed_shapes(qa.resolve_config({}, graphs))
    assert note is not None and "--data.pad_multiple=64" in note
    assert (
        qa.graphs_without_fixed_shapes(qa.resolve_config({}, graphs + [("pad_multiple", "64")]))
        is None
    )
    assert qa.graphs_without_fixed_shapes(qa.resolve_config({}, [("compile", "default")])) is None
    monkeypatch.undo()  # the device as this machine has it: no CUDA graphs on a CPU
    on_cpu = [("compile", "reduce-overhead"), ("device", "cpu")]
    assert qa.graphs_without_fixed_shapes(qa.resolve_config({}, on_cpu)) is None


@pytest.mark.slow
def test_training_through_inductor_on_cpu(prepared: Path, tmp_path: Path) -> None:
    """Inductor's generated code, without dropout (its kernels draw their own masks)."""
    plain, compiled = tmp_path / "plain", tmp_path / "compiled"
    flags = [f"--prepared={prepared}", *TINY, "--train.log_every=1", "--model.survival=1"]
    flags += ["--model.dropout=0", "--model.char_dropout=0", "--model.attention_dropout=0"]
    assert main(["train", "qa", *flags, f"--out={plain}"]) == 0
    assert main(["train", "qa", *flags, f"--out={compiled}", "--train.compile=default"]) == 0
    assert _losses(compiled) == pytest.approx(_losses(plain), rel=1e-3)


@pytest.mark.parametrize(
    ("pair", "said"),
    [
        (("ctx",), "example 3: a tuple of 1, not a (context, question) pair"),
        ("ctx", "example 3: a str, not a (context, question) pair"),
        (("ctx", 5), "example 3: the question is a int, not a str"),
    ],
)
def test_an_example_that_is_no_pair_of_strings_is_named(pair: object, said: str) -> None:
    with pytest.raises(TypeError) as error:
        qa.check_pair(3, pair)
    assert str(error.value) == said
