"""``evaluate_predictions`` against a separate transcription of the official SQuAD v1.1 and
v2.0 evaluation scripts, on randomly perturbed predictions for every question (the official
scripts and ours differ only on questions with no prediction, which these leave out)."""

from __future__ import annotations

import gzip
import json
import math
import random
import re
import string
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from treeqa.eval.squad import evaluate_predictions

# --- the official scripts' logic, written out as they have it -----------------------------


def official_normalize(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def official_v1(dataset: list[Any], predictions: dict[str, str]) -> dict[str, float]:
    def f1(prediction: str, truth: str) -> float:
        p, g = official_normalize(prediction).split(), official_normalize(truth).split()
        same = sum((Counter(p) & Counter(g)).values())
        if same == 0:
            return 0
        precision, recall = same / len(p), same / len(g)
        return 2 * precision * recall / (precision + recall)

    exact = total = f1_sum = 0.0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                truths, pred = [a["text"] for a in qa["answers"]], predictions[qa["id"]]
                exact += max(official_normalize(pred) == official_normalize(t) for t in truths)
                f1_sum += max(f1(pred, t) for t in truths)
    return {"exact_match": 100 * exact / total, "f1": 100 * f1_sum / total}


def official_v2(
    dataset: list[Any], preds: dict[str, str], na_probs: dict[str, float] | None, thresh: float
) -> dict[str, float]:
    def tokens(s: str) -> list[str]:
        return official_normalize(s).split() if s else []

    def f1(gold: str, pred: str) -> float:
        g, p = tokens(gold), tokens(pred)
        same = sum((Counter(g) & Counter(p)).values())
        if len(g) == 0 or len(p) == 0:
            return int(g == p)
        if same == 0:
            return 0
        precision, recall = same / len(p), same / len(g)
        return 2 * precision * recall / (precision + recall)

    probs = na_probs if na_probs is not None else {k: 0.0 for k in preds}
    has_ans = {qa["id"]: bool(qa["answers"]) for a in dataset for p in a["paragraphs"] for qa in p["qas"]}  # fmt: skip
    exact_raw: dict[str, float] = {}
    f1_raw: dict[str, float] = {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                golds = [a["text"] for a in qa["answers"] if official_normalize(a["text"])] or [""]
                if qa["id"] not in preds:
                    continue
                pred = preds[qa["id"]]
                exact_raw[qa["id"]] = max(
                    int(official_normalize(g) == official_normalize(pred)) for g in golds
                )
                f1_raw[qa["id"]] = max(f1(g, pred) for g in golds)

    def threshold(scores: dict[str, float]) -> dict[str, float]:
        return {k: float(not has_ans[k]) if probs[k] > thresh else s for k, s in scores.items()}

    def mean(scores: dict[str, float], ids: list[str]) -> float:
        return 100.0 * sum(scores[k] for k in ids) / len(ids)

    def best(scores: dict[str, float]) -> tuple[float, float]:
        current = best_score = sum(1 for k in has_ans if not has_ans[k])
        best_thresh = 0.0
        for k in sorted(probs, key=lambda k: probs[k]):
            if k not in scores:
                continue
            current += scores[k] if has_ans[k] else (-1 if preds[k] else 0)
            if current > best_score:
                best_score, best_thresh = current, probs[k]
        return 100.0 * best_score / len(scores), best_thresh

    exact, f1s = threshold(exact_raw), threshold(f1_raw)
    everyone = list(exact)
    answerable = [k for k in everyone if has_ans[k]]
    unanswerable = [k for k in everyone if not has_ans[k]]
    out = {"exact_match": mean(exact, everyone), "f1": mean(f1s, everyone), "total": len(exact)}
    if answerable:  # the script leaves out a part with no question
        out |= {"has_ans_exact": mean(exact, answerable), "has_ans_f1": mean(f1s, answerable)}
        out["has_ans_total"] = len(answerable)
    if unanswerable:
        out |= {"no_ans_exact": mean(exact, unanswerable), "no_ans_f1": mean(f1s, unanswerable)}
        out["no_ans_total"] = len(unanswerable)
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = best(exact_raw)
        out["best_f1"], out["best_f1_thresh"] = best(f1_raw)
    return out


# --- perturbed predictions ----------------------------------------------------------------

Perturb = Callable[[str, str, random.Random], str]
PERTURBATIONS: list[Perturb] = [
    lambda g, c, r: g,
    lambda g, c, r: g.upper(),
    lambda g, c, r: "The " + g + ".",
    lambda g, c, r: " ".join(g.split()[:-1]),
    lambda g, c, r: " ".join(g.split()[1:]) + " and more words",
    lambda g, c, r: "",
    lambda g, c, r: " \t" + g.replace(" ", "\u00a0") + "\n",
    lambda g, c, r: c[(s := r.randrange(max(1, len(c) - 30))) : s + r.randint(1, 30)],
    lambda g, c, r: g + " " + g,
    lambda g, c, r: "a an the",
    lambda g, c, r: ",".join(g),
    lambda g, c, r: g.replace("-", " - ").replace("'", " ' "),
    lambda g, c, r: "Über café " + g.lower() + " ＡＢＣ",
    # punctuation and spaces outside string.punctuation: kept, or split on, as str.split does
    lambda g, c, r: "“" + g.replace(" ", r.choice(["\u2009", "\x85", "\u3000", "\x1c"])) + "”—",
]


def perturbed(dataset: list[Any], rng: random.Random) -> tuple[dict[str, str], dict[str, float]]:
    preds, na = {}, {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                gold = rng.choice([a["text"] for a in qa["answers"]] or [""])
                preds[qa["id"]] = rng.choice(PERTURBATIONS)(gold, p["context"], rng)
                # ties (one decimal) as well as distinct values, and log-odds beyond [0, 1]
                na[qa["id"]] = rng.choice([rng.random(), round(rng.random(), 1), rng.gauss(0, 3)])
    return preds, na


def assert_same(ours: dict[str, Any], official: dict[str, float]) -> None:
    parts = ("has_ans_exact", "has_ans_f1", "no_ans_exact", "no_ans_f1")
    assert {k for k in ours if k in parts} == {k for k in official if k in parts}
    for key, value in official.items():
        assert math.isclose(ours[key], value, abs_tol=1e-9), (key, ours[key], value)


def check(dataset: dict[str, Any], seed: int) -> None:
    rng = random.Random(seed)
    data = dataset["data"]
    for _ in range(3):
        preds, na = perturbed(data, rng)
        if dataset["version"].lstrip("v").startswith("1"):
            assert_same(evaluate_predictions(dataset, preds), official_v1(data, preds))
            # v1.1 counts a question with no prediction, at 0, as ours does
            partial = {k: v for k, v in preds.items() if rng.random() < 0.7}
            assert_same(evaluate_predictions(dataset, partial), official_v1(data, partial))
            continue
        for na_probs in (None, na):
            for thresh in (1.0, 0.5):
                ours = evaluate_predictions(
                    dataset, preds, na_probs=na_probs, na_prob_thresh=thresh
                )
                assert_same(ours, official_v2(data, preds, na_probs, thresh))


# --- a fixture written here, and real dev questions ---------------------------------------

WORDS = (
    "the a an Denver Broncos U.S. 1918 red dog barked, café naïve Straße 東京 well-known"
    " “the” ‘a’ 1,000 – theater another".split()
)


def synthetic(version: str, rng: random.Random, questions: int = 120) -> dict[str, Any]:
    paragraphs = []
    for p in range(questions // 4):
        context = " ".join(rng.choice(WORDS) for _ in range(40))
        qas = []
        for k in range(4):
            answers = []
            if version == "v1.1" or rng.random() < 0.6:
                for _ in range(rng.randint(1, 3)):
                    start = rng.randrange(len(context) - 20)
                    text = context[start : start + rng.randint(1, 20)]
                    answers.append({"text": text, "answer_start": start})
            qas.append({"id": f"q{p}-{k}", "question": "?", "answers": answers})
        paragraphs.append({"context": context, "qas": qas})
    return {"version": version, "data": [{"title": "t", "paragraphs": paragraphs}]}


@pytest.mark.parametrize("version", ["v1.1", "v2.0"])
def test_scores_equal_the_official_scripts_on_a_written_fixture(version: str) -> None:
    check(synthetic(version, random.Random(version)), seed=0)


@pytest.mark.parametrize("answerable", [True, False])
def test_a_v2_set_with_one_kind_of_question_leaves_out_the_other_part(answerable: bool) -> None:
    dataset = synthetic("v2.0", random.Random(1))
    for article in dataset["data"]:
        for p in article["paragraphs"]:
            p["qas"] = [qa for qa in p["qas"] if bool(qa["answers"]) == answerable]
    check(dataset, seed=1)


def sample(dataset: dict[str, Any], n: int, rng: random.Random) -> dict[str, Any]:
    """``dataset`` with ``n`` of its questions, drawn at random, and only their paragraphs."""
    ids = [qa["id"] for a in dataset["data"] for p in a["paragraphs"] for qa in p["qas"]]
    keep = set(rng.sample(ids, n))
    data = []
    for article in dataset["data"]:
        paragraphs = [
            {**p, "qas": [qa for qa in p["qas"] if qa["id"] in keep]} for p in article["paragraphs"]
        ]
        if any(p["qas"] for p in paragraphs):
            data.append({**article, "paragraphs": [p for p in paragraphs if p["qas"]]})
    return {**dataset, "data": data}


@pytest.mark.real_data
@pytest.mark.parametrize(
    "name", ["dev-v1.1.reconstructed.json.gz", "dev-v2.0.reconstructed.json.gz"]
)
def test_scores_equal_the_official_scripts_on_real_dev_questions(real_data: Any, name: str) -> None:
    with gzip.open(real_data / "squad" / name, "rt", encoding="utf-8") as f:
        dataset = json.load(f)
    for seed in range(2):
        check(sample(dataset, 400, random.Random(seed)), seed)
