"""``treeqa data prepare squad`` and ``treeqa evaluate qa`` end to end through ``main()``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from treeqa.cli.main import main

CONTEXT = "The U.S. Army's well-known base is in Fort Bragg. It opened in 1918."


def squad(version: str) -> dict[str, Any]:
    qas: list[dict[str, Any]] = [
        {"id": "q1", "question": "Where is the base?",
         "answers": [{"text": "Fort Bragg", "answer_start": CONTEXT.index("Fort Bragg")}]},
        {"id": "q2", "question": "When did it open?",
         "answers": [{"text": "1918", "answer_start": CONTEXT.index("1918")}]},
    ]  # fmt: skip
    if version == "v2.0":
        qas.append({"id": "u1", "question": "Who closed it?", "answers": [], "is_impossible": True})
    return {
        "version": version,
        "data": [{"title": "Fort_Bragg", "paragraphs": [{"context": CONTEXT, "qas": qas}]}],
    }


def last_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """Standard output under --json: one JSON object alone (what is said besides: stderr)."""
    return json.loads(capsys.readouterr().out)


def test_prepare_squad_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("spacy")
    (tmp_path / "train.json").write_text(json.dumps(squad("v2.0")))
    (tmp_path / "vectors.txt").write_text("fort 0.1 0.2\nbragg 0.3 0.4\n1918 0.5 0.6\n")
    argv = ["data", "prepare", "squad", "--train", str(tmp_path / "train.json"),
            "--dev", str(tmp_path / "train.json"), "--vectors", str(tmp_path / "vectors.txt"),
            "--out", str(tmp_path / "out"), "--vectors-cache", str(tmp_path / "cache")]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    meta = last_json(capsys)
    assert meta["version"] == "v2.0" and meta["vocab"]["words"] == 5
    assert (
        meta["splits"]["dev"]["examples"] == 3
        and meta["splits"]["dev"]["unanswerable_examples"] == 1
    )
    assert (tmp_path / "out" / "dev" / "context_chars.npy").is_file()
    assert main(argv) == 2  # --out is not empty
    assert "exists and is not empty" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text(json.dumps(squad("1.1"), indent=1)[:-30])
    assert main([*argv[:3], "--train", str(tmp_path / "bad.json"), *argv[5:], "--overwrite"]) == 2
    assert "bad.json:" in capsys.readouterr().err


def test_prepare_squad_names_what_a_broken_spacy_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Was: told to install treeqa[qa] where spaCy was installed but its `import click` failed.
    (tmp_path / "spacy").mkdir()
    (tmp_path / "spacy" / "__init__.py").write_text("import a_module_spacy_lacks\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "spacy", raising=False)
    (tmp_path / "train.json").write_text(json.dumps(squad("v1.1")))
    (tmp_path / "vectors.txt").write_text("fort 0.1 0.2\n")
    argv = ["data", "prepare", "squad", "--train", str(tmp_path / "train.json"),
            "--dev", str(tmp_path / "train.json"), "--vectors", str(tmp_path / "vectors.txt"),
            "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("treeqa data prepare squad: error: spaCy is installed but fails")
    assert "No module named 'a_module_spacy_lacks'" in err and len(err.splitlines()) == 1


def test_evaluate_qa_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gold.json").write_text(json.dumps(squad("v2.0")))
    (tmp_path / "pred.json").write_text(json.dumps({"q1": "Fort Bragg.", "u1": "", "zz": "x"}))
    argv = [
        "evaluate",
        "qa",
        "--gold",
        str(tmp_path / "gold.json"),
        "--predictions",
        str(tmp_path / "pred.json"),
    ]
    assert main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    scores = json.loads(captured.out)  # stdout: the JSON object alone, the table on stderr
    assert scores["exact_match"] == pytest.approx(200 / 3) and scores["f1"] == pytest.approx(
        200 / 3
    )
    assert (scores["has_ans_exact"], scores["no_ans_exact"]) == (50.0, 100.0)
    assert "exact_match 66.667" in captured.err and "NoAns" in captured.err
    assert (
        "1 of 3 questions have no prediction" in captured.err
        and "1 predictions for question ids" in captured.err
    )
    # The official --na-prob-file search: answering q1 and abstaining on u1 is best.
    (tmp_path / "na.json").write_text(json.dumps({"q1": 0.1, "q2": 0.2, "u1": 0.9}))
    assert main([*argv, "--na-probs", str(tmp_path / "na.json"), "--json"]) == 0
    captured = capsys.readouterr()
    best = json.loads(captured.out)
    assert best["best_exact"] == pytest.approx(200 / 3) and best["best_exact_thresh"] == 0.1
    assert "best    exact 66.667" in captured.err
    (tmp_path / "na.json").write_text(json.dumps({"q1": "high"}))
    assert main([*argv, "--na-probs", str(tmp_path / "na.json")]) == 2
    assert "no-answer score for 'q1' is not a number" in capsys.readouterr().err
    (tmp_path / "pred.json").write_text('{"q1": "Fort Bragg"')
    assert main(argv) == 2
    assert "pred.json:1:20" in capsys.readouterr().err
    assert main(["evaluate", "qa", "--gold", str(tmp_path / "gold.json")]) == 2


def test_evaluate_qa_refuses_no_answer_scores_it_cannot_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gold.json").write_text(json.dumps(squad("v2.0")))
    (tmp_path / "pred.json").write_text(json.dumps({"q1": "Fort Bragg", "q2": "1918", "u1": ""}))
    argv = ["evaluate", "qa", "--gold", str(tmp_path / "gold.json"),
            "--predictions", str(tmp_path / "pred.json"), "--na-probs", str(tmp_path / "na.json")]  # fmt: skip
    # A question answered but not scored: the file is named with the questions it lacks.
    (tmp_path / "na.json").write_text(json.dumps({"q1": 0.1}))
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"treeqa evaluate qa: error: {tmp_path / 'na.json'}: no no-answer score for 2 of the 3"
        " questions with a prediction (e.g. q2, u1): the threshold search needs one for each\n"
    )
    (tmp_path / "na.json").write_text('{"q1": 0.1, "q2": NaN, "u1": 0.9}')
    assert main(argv) == 2
    assert "no-answer score for 'q2' is not a number" in capsys.readouterr().err
    (tmp_path / "na.json").write_text(json.dumps({"q1": 0.1, "q2": 0.2, "u1": 0.9}))
    with pytest.raises(SystemExit):  # NaN is above no score and below none: never abstain
        main([*argv, "--na-prob-thresh", "nan"])
    assert "argument --na-prob-thresh: expected a number, got nan" in capsys.readouterr().err
    assert main([*argv, "--na-prob-thresh", "inf", "--json"]) == 0
    assert last_json(capsys)["no_ans_exact"] == 100.0


def test_evaluate_qa_refuses_a_directory_to_write_predictions_before_answering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No checkpoint is loaded and no question answered: the error comes first.
    argv = ["evaluate", "qa", "--checkpoint", str(tmp_path / "none"), "--prepared",
            str(tmp_path / "none"), "--write-predictions", str(tmp_path)]  # fmt: skip
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"treeqa evaluate qa: error: --write-predictions {tmp_path} is a directory; give a file name\n"
    )


def test_evaluate_qa_refuses_predictions_that_answer_none_of_the_gold_questions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gold.json").write_text(json.dumps(squad("v1.1")))
    pred = tmp_path / "pred.jsonl"
    argv = ["evaluate", "qa", "--gold", str(tmp_path / "gold.json"), "--predictions", str(pred)]
    # `treeqa predict qa --output` lines: one object is read as ids "id" and "answer" (was: a
    # score of 0 and two warnings), two are JSON lines.
    pred.write_text(json.dumps({"id": "q1", "answer": "Fort Bragg"}) + "\n")
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"treeqa evaluate qa: error: {pred}: none of its 2 question ids is in {tmp_path / 'gold.json'}"
        " (e.g. 'id', 'answer'); the answers to another file, or not {question id: answer text}?\n"
    )
    pred.write_text(pred.read_text() + json.dumps({"id": "q2", "answer": "1918"}) + "\n")
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"treeqa evaluate qa: error: {pred}:2:1: Extra data (expected one JSON object"
        " {question id: answer text}, not one a line)\n"
    )
    pred.write_text("{}")  # no answers at all: every question scores 0, as the official script
    assert main([*argv, "--json"]) == 0
    assert last_json(capsys)["f1"] == 0.0
    # An unanswerable question scored as v1.1: the gold file is named.
    (tmp_path / "gold2.json").write_text(json.dumps(squad("v2.0")))
    pred.write_text(json.dumps({"q1": "Fort Bragg"}))
    gold2 = ["--gold", str(tmp_path / "gold2.json"), "--predictions", str(pred)]
    assert main(["evaluate", "qa", *gold2, "--squad-version", "v1.1"]) == 2
    assert capsys.readouterr().err.startswith(
        f"treeqa evaluate qa: error: {tmp_path / 'gold2.json'}: question 'u1' has no gold answer"
    )


def test_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["data", "prepare", "squad"], ["evaluate", "qa"]):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--help"])
        assert exit_.value.code == 0
        assert "example:" in capsys.readouterr().out


def test_prepare_squad_overwrite_replaces_only_a_prepared_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "train.json").write_text(json.dumps(squad("v1.1")))
    (tmp_path / "vectors.txt").write_text("fort 0.1 0.2\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    argv = ["data", "prepare", "squad", "--train", str(tmp_path / "train.json"),
            "--dev", str(tmp_path / "train.json"), "--vectors", str(tmp_path / "vectors.txt"),
            "--out", str(mine)]  # fmt: skip
    assert main(argv) == 2
    assert "exists and is not empty (--overwrite, or overwrite=True" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 2  # was: the folder deleted, notes and all
    assert capsys.readouterr().err == (
        f"treeqa data prepare squad: error: {mine} was not written by `data prepare squad` (no meta.json of "
        "its own), so --overwrite does not delete it; give another --out\n"
    )
    assert (mine / "notes.txt").read_text() == "keep me"
    for flag, value, message in (
        ("--context-limit", "0", "expected a whole number of at least 1, got 0"),
        ("--char-limit", "-2", "expected a whole number of at least 1, got -2"),
        ("--negative-fraction", "1.5", "expected a number in [0, 1], got 1.5"),
    ):
        with pytest.raises(SystemExit):
            main([*argv, flag, value])
        assert f"argument {flag}: {message}" in capsys.readouterr().err


def test_predict_qa_input_lines_name_the_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.dumps({"context": CONTEXT, "question": "Where?"})
    cases = {
        "not json": "2: invalid JSON: Expecting value",
        '["a", "b"]': '2: expected {"context": ..., "question": ...}',
        '{"context": "Paris."}': "2: field 'question': expected a non-empty string",
        '{"context": 5, "question": "Where?"}': "2: field 'context': expected a non-empty string",
        '{"context": "  ", "question": "Where?"}': "2: field 'context': expected a non-empty string",
    }
    path = tmp_path / "in.jsonl"
    for line, message in cases.items():
        path.write_text(f"{good}\n{line}\n")
        # The input is read before the checkpoint is loaded: none is needed to find the error.
        argv = ["predict", "qa", "--checkpoint", str(tmp_path / "none"), "--input", str(path)]
        assert main(argv) == 2
        assert capsys.readouterr().err == f"treeqa predict qa: error: {path}:{message}\n"
    path.write_bytes(good.encode() + b'\n{"context": "caf\xe9"}\n')
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"treeqa predict qa: error: {path}:2: not UTF-8 text (invalid continuation byte)\n"
    )


def test_evaluate_qa_with_seeds_says_what_seeds_are_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["evaluate", "qa", "--seeds", "2"]) == 2
    assert capsys.readouterr().err == (
        "treeqa evaluate qa: error: --seeds is for sentiment: treeqa evaluate sentiment takes it,"
        " treeqa evaluate qa does not; for QANet, train each seed with"
        " `treeqa train qa --train.seed=K` and score it with --checkpoint\n"
    )


def test_prepare_squad_refuses_a_negative_seed_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["data", "prepare", "squad", "--train", str(tmp_path / "none.json"), "--dev",
            str(tmp_path / "none.json"), "--out", str(tmp_path / "out"), "--seed", "-1"]  # fmt: skip
    with pytest.raises(SystemExit):
        main(argv)
    assert "argument --seed: expected a whole number of at least 0, got -1" in (
        capsys.readouterr().err
    )
