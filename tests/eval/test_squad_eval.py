"""The official SQuAD v1.1/v2.0 metrics: normalisation, EM, token F1, max over gold answers,
HasAns/NoAns, missing and unknown predictions, and file errors. Values are hand-computed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from treeqa.data.squad import SquadFormatError
from treeqa.eval.squad import (
    NoAnswerScoreError,
    PredictionFileError,
    compute_exact,
    compute_f1,
    evaluate_predictions,
    exact_match_score,
    f1_score,
    load_gold,
    load_na_probs,
    load_predictions,
    normalize_answer,
)


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Cat", "cat"),
        ("an apple, a day", "apple day"),
        ("theatre anthem", "theatre anthem"),  # articles only as whole words
        ("  Denver\tBroncos \n", "denver broncos"),
        ("U.S.-based", "usbased"),  # ASCII punctuation is deleted, not turned into space
        ("“quoted” café", "“quoted” café"),  # non-ASCII punctuation stays
        ("the", ""),
        ("A-the", "athe"),  # punctuation goes first, so "a-the" is one word
    ],
)
def test_normalize_answer(text: str, normal: str) -> None:
    assert normalize_answer(text) == normal


def test_v1_exact_and_f1() -> None:
    assert exact_match_score("the Denver Broncos!", "Denver Broncos")
    # pred [big, red, dog] vs gold [red, dog, barked]: 2 shared, P = R = 2/3
    assert f1_score("the big red dog", "a red dog barked") == pytest.approx(2 / 3)
    # repeated tokens count once per match (Counter intersection): P = 1/3, R = 1
    assert f1_score("dog dog dog", "dog") == pytest.approx(0.5)
    assert f1_score("", "dog") == 0.0
    assert f1_score("the", "a") == 0.0 and exact_match_score("the", "a")  # v1.1 quirk


def test_v2_exact_and_f1_for_no_answer() -> None:
    assert compute_exact("", "") == 1 and compute_f1("", "") == 1.0
    assert compute_f1("", "Denver") == 0.0 and compute_f1("Denver", "") == 0.0
    assert compute_f1("the", "") == 1.0  # both normalise to no tokens
    assert compute_f1("big red dog", "red dog") == pytest.approx(0.8)


def article(*qas: dict[str, Any]) -> dict[str, Any]:
    return {"title": "t", "paragraphs": [{"context": "unused by scoring", "qas": list(qas)}]}


def q(qid: str, *answers: str, impossible: bool | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": qid,
        "question": "?",
        "answers": [{"text": a, "answer_start": 0} for a in answers],
    }
    if impossible is not None:
        out["is_impossible"] = impossible
    return out


V1 = {
    "version": "1.1",
    "data": [
        article(q("a", "Denver Broncos", "the Denver Broncos"), q("b", "Santa Clara, California")),
        article(q("c", "1918", "in 1918", "the year 1918"), q("d", "red dog barked")),
    ],
}


def test_v1_fixture_by_hand() -> None:
    preds = {"a": "Broncos", "b": "santa clara california.", "c": "year 1918", "d": "big red dog"}
    s = evaluate_predictions(V1, preds)
    # a: EM 0, F1 max(2*1*.5/1.5) = 2/3; b: EM 1, F1 1; c: EM 1 (gold "the year 1918"), F1 1;
    # d: [big, red, dog] vs [red, dog, barked] -> 2/3
    assert s["version"] == "v1.1" and s["total"] == 4 and s["missing"] == 0
    assert s["exact_match"] == pytest.approx(100 * 2 / 4)
    assert s["f1"] == pytest.approx(100 * (2 / 3 + 1 + 1 + 2 / 3) / 4)


def test_missing_predictions_score_zero_and_unknown_ids_are_counted() -> None:
    s = evaluate_predictions(V1, {"a": "Denver Broncos", "zzz": "x"})
    assert s["exact_match"] == pytest.approx(25.0) and s["f1"] == pytest.approx(25.0)
    assert (s["answered"], s["missing"], s["unknown"]) == (1, 3, 1)
    assert s["missing_examples"] == ["b", "c", "d"]


V2 = {
    "version": "v2.0",
    "data": [
        article(
            q("h1", "Denver Broncos", impossible=False),
            q("h2", "red dog barked", "dog", impossible=False),
            q("n1", impossible=True),
            q("n2", impossible=True),
            q("n3", impossible=True),
        )
    ],
}


def test_v2_fixture_by_hand_with_has_ans_and_no_ans() -> None:
    preds = {"h1": "Denver", "h2": "big red dog", "n1": "", "n2": "something", "n3": ""}
    s = evaluate_predictions(V2, preds)
    # h1: EM 0, F1 2*1*.5/1.5 = 2/3; h2: EM 0, F1 max(2/3, P 1/3 R 1 -> .5) = 2/3
    # n1, n3: "" vs [""] -> 1, 1; n2: 0, 0
    assert s["version"] == "v2.0" and s["total"] == 5
    assert s["exact_match"] == pytest.approx(100 * 2 / 5)
    assert s["f1"] == pytest.approx(100 * (2 / 3 + 2 / 3 + 2) / 5)
    assert (s["has_ans_total"], s["no_ans_total"]) == (2, 3)
    assert s["has_ans_exact"] == 0.0 and s["has_ans_f1"] == pytest.approx(100 * 2 / 3)
    assert s["no_ans_exact"] == pytest.approx(100 * 2 / 3) and s["no_ans_f1"] == pytest.approx(
        100 * 2 / 3
    )


def test_v2_best_threshold_as_the_official_script() -> None:
    # Span answers for every question, and a no-answer score for each; the search answers the
    # questions scored at most the threshold and abstains on the rest.
    spans = {"h1": "Denver Broncos", "h2": "big red dog", "n1": "x", "n2": "y", "n3": "z"}
    na = {"h1": -2.0, "n1": -1.0, "h2": 0.5, "n2": 1.0, "n3": 3.0}
    s = evaluate_predictions(V2, spans, na_probs=na)
    # Start: abstain everywhere = 3 (the no-answer questions). In na order: h1 +1 -> 4 (best,
    # thresh -2); n1 -1 -> 3; h2 +0 (EM) / +2/3 (F1) -> 3 / 3.67; n2, n3 -1 each.
    assert s["best_exact"] == pytest.approx(100 * 4 / 5) and s["best_exact_thresh"] == -2.0
    assert s["best_f1"] == pytest.approx(100 * 4 / 5) and s["best_f1_thresh"] == -2.0
    # Without na_probs (or for v1.1) there is no search.
    assert "best_f1" not in evaluate_predictions(V2, spans)


def test_v2_drops_gold_texts_that_normalise_to_nothing() -> None:
    data = {"version": "v2.0", "data": [article(q("x", "The", impossible=False))]}
    # Only "" can match now, yet the question stays in HasAns: the v2.0 script splits on
    # bool(qa["answers"]), before any normalisation.
    s = evaluate_predictions(data, {"x": ""})
    assert (s["exact_match"], s["has_ans_total"], "no_ans_total" in s) == (100.0, 1, False)
    # scored as v1.1 the same question needs "the"/"a" and F1 is 0 anyway
    v1 = evaluate_predictions(data, {"x": "a"}, version="v1.1")
    assert (v1["exact_match"], v1["f1"]) == (100.0, 0.0)


def test_v2_no_answer_scores_above_the_threshold_abstain_as_the_official_script() -> None:
    # Margins (log-odds) go above 1; the official script then scores those questions as
    # answered with "" in every key but the best-threshold search.
    spans = {"h1": "Denver Broncos", "h2": "big red dog", "n1": "x", "n2": "y"}
    na = {"h1": 0.5, "h2": 2.0, "n1": 3.0, "n2": -1.0, "n3": 5.0}
    s = evaluate_predictions(V2, spans, na_probs=na)
    # h1 answered (EM 1, F1 1); h2 abstains (0, 0); n1 abstains (1, 1); n2 answered (0, 0);
    # n3 has no prediction: 0 whatever its score.
    assert s["exact_match"] == pytest.approx(100 * 2 / 5) and s["f1"] == pytest.approx(40.0)
    assert (s["has_ans_exact"], s["no_ans_exact"]) == pytest.approx((50.0, 100 / 3))
    s = evaluate_predictions(V2, spans, na_probs=na, na_prob_thresh=2.5)  # h2 answers now
    assert s["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1) / 5)
    # The search itself uses the raw scores, from the 2 unanswerable questions with a
    # prediction (n3 has none): n2 (-1) answers wrongly, h1 +1, h2 +2/3 (F1), n1 -1.
    assert s["best_f1"] == pytest.approx(100 * (2 - 1 + 1 + 2 / 3) / 5)
    assert s["best_f1_thresh"] == 2.0
    at_best = evaluate_predictions(V2, spans, na_probs=na, na_prob_thresh=s["best_f1_thresh"])
    assert at_best["f1"] == pytest.approx(s["best_f1"])
    with pytest.raises(ValueError, match="no-answer scores are for SQuAD v2.0"):
        evaluate_predictions(V1, {"a": "x"}, na_probs={"a": 0.0})


def test_gold_answers_that_cannot_be_scored_are_errors_naming_the_question(
    tmp_path: Path,
) -> None:
    strings = {"version": "1.1", "data": [article({"id": "s1", "question": "?", "answers": ["x"]})]}
    (tmp_path / "strings.json").write_text(json.dumps(strings))
    with pytest.raises(SquadFormatError, match=r"question 's1'.*objects with a string \"text\""):
        load_gold(tmp_path / "strings.json")
    duplicated = {"version": "1.1", "data": [article(q("d", "x"), q("d", "y"))]}
    (tmp_path / "dup.json").write_text(json.dumps(duplicated))
    with pytest.raises(SquadFormatError, match="question 'd'.*a question id used twice"):
        load_gold(tmp_path / "dup.json")
    with pytest.raises(ValueError, match="question 'n1' has no gold answer.*score the file as v2"):
        evaluate_predictions(V2, {"n1": ""}, version="v1.1")


def test_arguments_of_the_wrong_kind_are_named() -> None:
    # Each was an AttributeError or TypeError from deep inside (or, for a list, a score of 0).
    with pytest.raises(TypeError, match=r"dataset_json is a str: .* \(load_gold reads a file\)"):
        evaluate_predictions("dev-v1.1.json", {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="predictions is a list: give a dict of question id"):
        evaluate_predictions(V1, [("a", "x")])  # type: ignore[arg-type]
    answer = {"answer": "x", "start": 0, "end": 1}  # one result of recipes.qa.predict
    with pytest.raises(TypeError, match="the prediction for 'a' is a dict, not the answer text"):
        evaluate_predictions(V1, {"a": answer})  # type: ignore[dict-item]


def test_version_detected_from_is_impossible_without_version_field() -> None:
    assert evaluate_predictions({"data": V2["data"]}, {})["version"] == "v2.0"
    assert evaluate_predictions(V1["data"], {})["version"] == "v1.1"


def test_file_loaders_locate_errors(tmp_path: Path) -> None:
    (tmp_path / "gold.json.gz").write_bytes(gzip.compress(json.dumps(V1).encode()))
    assert load_gold(tmp_path / "gold.json.gz") == V1
    (tmp_path / "broken.json").write_text('{"a": "x",\n "b": }\n')
    with pytest.raises(PredictionFileError, match=r"broken\.json:2:7: Expecting value"):
        load_predictions(tmp_path / "broken.json")
    with pytest.raises(SquadFormatError, match=r"broken\.json:2:7"):
        load_gold(tmp_path / "broken.json")
    (tmp_path / "num.json").write_text('{"a": 3}')
    with pytest.raises(PredictionFileError, match="prediction for 'a' is not a string"):
        load_predictions(tmp_path / "num.json")
    (tmp_path / "list.json").write_text('["a"]')
    with pytest.raises(PredictionFileError, match="expected a JSON object"):
        load_predictions(tmp_path / "list.json")
    (tmp_path / "empty.json").write_text('{"version": "v1.1", "data": []}')
    with pytest.raises(SquadFormatError, match=r"empty\.json: no question to score against"):
        load_gold(tmp_path / "empty.json")
    bad = {"data": [article({"question": "?", "answers": []})]}
    (tmp_path / "noid.json").write_text(json.dumps(bad))
    with pytest.raises(SquadFormatError, match=r"noid\.json: data\[0\] \('t'\): question 'None'"):
        load_gold(tmp_path / "noid.json")


def test_a_question_with_no_prediction_is_no_right_abstention_in_the_threshold_search() -> None:
    # n1-n3 are left out of the predictions: they score 0 in every key, the best threshold's
    # score among them, so leaving out the unanswerable questions cannot raise it.
    spans = {"h1": "Denver Broncos", "h2": "red dog"}
    na = {"h1": 0.1, "h2": 0.2, "n1": 0.9, "n2": 0.9, "n3": 0.9}
    s = evaluate_predictions(V2, spans, na_probs=na)
    assert s["f1"] == pytest.approx(100 * (1 + 0.8) / 5)
    assert s["best_f1"] == pytest.approx(s["f1"]) and s["best_exact"] == pytest.approx(20.0)
    complete = evaluate_predictions(V2, {**spans, "n1": "", "n2": "", "n3": ""}, na_probs=na)
    assert complete["best_f1"] == pytest.approx(100 * (1 + 0.8 + 3) / 5)


def test_no_answer_scores_missing_for_an_answered_question_or_nan_are_errors(
    tmp_path: Path,
) -> None:
    spans = {"h1": "Denver Broncos", "h2": "red dog", "n1": "x"}
    # Without a score for h2 the search used to treat it as abstained in best_* and as
    # answered in every other key.
    with pytest.raises(
        NoAnswerScoreError, match=r"no no-answer score for 1 of the 3.*\(e\.g\. h2\)"
    ):
        evaluate_predictions(V2, spans, na_probs={"h1": 0.1, "n1": 0.9})
    with pytest.raises(NoAnswerScoreError, match="NaN"):
        evaluate_predictions(V2, spans, na_probs={"h1": 0.1, "h2": float("nan"), "n1": 0.9})
    # Scores for questions without a prediction (n2, n3) are not needed.
    assert evaluate_predictions(V2, spans, na_probs={"h1": 0.1, "h2": 0.2, "n1": 0.9})["total"] == 5
    (tmp_path / "na.json").write_text('{"h1": 0.1, "h2": NaN}')
    with pytest.raises(PredictionFileError, match=r"na\.json: the no-answer score for 'h2'"):
        load_na_probs(tmp_path / "na.json")


def test_a_question_id_given_twice_is_an_error_not_the_last_answer(tmp_path: Path) -> None:
    (tmp_path / "twice.json").write_text('{"a": "Denver Broncos", "b": "x", "a": "wrong"}')
    with pytest.raises(PredictionFileError, match=r"twice\.json: question id 'a' is given twice"):
        load_predictions(tmp_path / "twice.json")
    (tmp_path / "na.json").write_text('{"a": 0.1, "a": 0.9}')
    with pytest.raises(PredictionFileError, match="question id 'a' is given twice"):
        load_na_probs(tmp_path / "na.json")
    # A repeated key inside a value is the value's error, not a repeated question id.
    (tmp_path / "nested.json").write_text('{"a": {"x": 1, "x": 2}}')
    with pytest.raises(PredictionFileError, match="prediction for 'a' is not a string"):
        load_predictions(tmp_path / "nested.json")


def test_a_numeric_question_id_is_read_as_preparation_reads_it() -> None:
    gold = {"data": [{"paragraphs": [{"qas": [{"id": 12345, "answers": [{"text": "Denver"}]}]}]}]}
    scores = evaluate_predictions(gold, {"12345": "Denver"})
    assert scores["exact_match"] == 100.0 and scores["total"] == 1


def test_damaged_gzip_deep_nesting_and_huge_integers_are_file_errors(tmp_path: Path) -> None:
    packed = bytearray(gzip.compress(json.dumps(V1).encode()))
    packed[20:40] = bytes(b ^ 0x55 for b in packed[20:40])  # a damaged deflate stream
    (tmp_path / "damaged.json.gz").write_bytes(bytes(packed))
    with pytest.raises(SquadFormatError, match=r"damaged\.json\.gz: cannot read the file"):
        load_gold(tmp_path / "damaged.json.gz")
    with pytest.raises(PredictionFileError, match=r"damaged\.json\.gz: cannot read the file"):
        load_predictions(tmp_path / "damaged.json.gz")
    (tmp_path / "deep.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(SquadFormatError, match=r"deep\.json: JSON nested too deeply"):
        load_gold(tmp_path / "deep.json")
    with pytest.raises(PredictionFileError, match=r"deep\.json: JSON nested too deeply"):
        load_predictions(tmp_path / "deep.json")
    (tmp_path / "long.json").write_text('{"a": ' + "1" * 5000 + "}")
    with pytest.raises(PredictionFileError, match=r"long\.json: .*digits"):
        load_na_probs(tmp_path / "long.json")


def test_a_predictions_or_no_answer_file_not_utf8_names_its_line_and_column(
    tmp_path: Path,
) -> None:
    (tmp_path / "latin1.json").write_bytes('{"a": "x",\n "b": "café"}'.encode("latin-1"))
    with pytest.raises(PredictionFileError, match=r"latin1\.json:2:11: not UTF-8 text"):
        load_predictions(tmp_path / "latin1.json")
    (tmp_path / "na.json").write_bytes(b'{"a": 0.5,\n "\xe9": 0.1}')
    with pytest.raises(PredictionFileError, match=r"na\.json:2:3: not UTF-8 text"):
        load_na_probs(tmp_path / "na.json")
