"""SQuAD metrics: the official v1.1 and v2.0 evaluation scripts, re-implemented exactly.

One module for training, ``treeqa evaluate qa``, benchmarks and serving. Scores are over
*every* question of the gold file and in percent, like the official scripts. The two
versions differ in small ways that change numbers, so each is kept as written:

- v1.1: every gold text counts; token F1 is 0 when nothing overlaps (so "" vs "" scores 0).
- v2.0: gold texts that normalise to "" are dropped and a question left with none is
  unanswerable (gold ``[""]``); token F1 between empty token lists is 1 when both are empty;
  scores are also split into HasAns / NoAns.

One deliberate difference: a question with no prediction scores 0 under both versions (v1.1
does this; the v2.0 script prints "Missing prediction", leaves it out of its raw scores and then
fails on it with a KeyError in its HasAns/NoAns split), so a partial predictions file can never
raise the score.
"""

from __future__ import annotations

import json
import math
import re
import string
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from treeqa.data.squad import SquadFormatError, json_beyond_syntax, read_json_text

__all__ = [
    "NoAnswerScoreError",
    "PredictionFileError",
    "compute_exact",
    "compute_f1",
    "evaluate_predictions",
    "exact_match_score",
    "f1_score",
    "gold_answers",
    "load_gold",
    "load_predictions",
    "normalize_answer",
]

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    """Lower-case, drop ASCII punctuation, drop the words a/an/the, squash whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())


# --- v1.1 (evaluate-v1.1.py) -------------------------------------------------------------


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> float:
    pred = normalize_answer(prediction).split()
    gold = normalize_answer(ground_truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


# --- v2.0 (evaluate-v2.0.py) -------------------------------------------------------------


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def compute_exact(a_gold: str, a_pred: str) -> int:
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    gold, pred = _tokens(a_gold), _tokens(a_pred)
    if not gold or not pred:
        return float(gold == pred)  # no-answer: right only when both are empty
    same = sum((Counter(gold) & Counter(pred)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


# --- scoring -----------------------------------------------------------------------------


def _version(dataset: Mapping[str, Any] | list[Any]) -> str:
    data: Any = dataset
    if isinstance(dataset, Mapping):
        if str(dataset.get("version", "")).lstrip("v").startswith("2"):
            return "v2.0"
        data = dataset.get("data", [])
    impossible = any(
        "is_impossible" in qa
        for article in data
        for p in article.get("paragraphs", [])
        for qa in p.get("qas", [])
    )
    return "v2.0" if impossible else "v1.1"


def gold_answers(
    dataset: Mapping[str, Any] | list[Any], source: str = "<gold>"
) -> list[tuple[str, list[str]]]:
    """``(question id, gold answer texts)`` for every question, in file order. Accepts the
    whole SQuAD JSON object or its ``"data"`` list; a malformed entry raises
    :class:`SquadFormatError` naming the article and question."""
    data = dataset.get("data") if isinstance(dataset, Mapping) else dataset
    if not isinstance(data, list):
        raise SquadFormatError('no "data" list at the top level', source)
    out = []
    seen: set[str] = set()
    for i, article in enumerate(data):
        title = article.get("title") if isinstance(article, dict) else None
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise SquadFormatError('needs a "paragraphs" list', source, article=i, title=title)
        for p in paragraphs:
            qas = p.get("qas") if isinstance(p, dict) else None
            if not isinstance(qas, list):
                raise SquadFormatError(
                    'a paragraph needs a "qas" list', source, article=i, title=title
                )
            for qa in qas:
                qid = qa.get("id") if isinstance(qa, dict) else None
                if isinstance(qid, int) and not isinstance(qid, bool):
                    qid = str(qid)  # as preparation reads it; predictions' keys are strings
                answers = qa.get("answers") if isinstance(qa, dict) else None
                texts = (
                    [a.get("text") if isinstance(a, dict) else None for a in answers]
                    if isinstance(answers, list)
                    else None
                )
                if (
                    not isinstance(qid, str)
                    or texts is None
                    or not all(isinstance(t, str) for t in texts)
                ):
                    raise SquadFormatError(
                        'a question needs an "id" and "answers", a list of objects with a'
                        ' string "text"',
                        source, article=i, title=title, question_id=str(qid),
                    )  # fmt: skip
                if qid in seen:  # the official scripts count it twice (v1.1) or once (v2.0)
                    raise SquadFormatError(
                        "a question id used twice (`treeqa data prepare squad --skip-bad` keeps "
                        "its first; the gold.json of a split it prepared holds the questions "
                        "kept, in this layout, for --gold)",
                        source,
                        article=i,
                        title=title,
                        question_id=qid,
                    )
                seen.add(qid)
                out.append((qid, [str(t) for t in texts]))
    return out


def score_questions(
    dataset_json: Mapping[str, Any] | list[Any], predictions: Mapping[str, str], version: str
) -> tuple[dict[str, float], dict[str, float], dict[str, bool], list[str]]:
    """Per question: exact (0/1) and F1 of its prediction against the best gold answer, whether
    it has an answer, and the ids with no prediction (scored 0)."""
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    has_ans: dict[str, bool] = {}
    missing: list[str] = []
    for qid, texts in gold_answers(dataset_json):
        has_ans[qid] = bool(texts)  # as the v2.0 script: even if every text normalises to ""
        if version == "v2.0":
            texts = [t for t in texts if normalize_answer(t)] or [""]
        elif not texts:
            raise ValueError(
                f"question {qid!r} has no gold answer, which SQuAD v1.1 scoring cannot score"
                " (an unanswerable question: score the file as v2.0)"
            )
        if qid not in predictions:
            missing.append(qid)
            exact[qid] = f1[qid] = 0.0
            continue
        pred = predictions[qid]
        if version == "v2.0":
            exact[qid] = max(compute_exact(t, pred) for t in texts)
            f1[qid] = max(compute_f1(t, pred) for t in texts)
        else:
            exact[qid] = max(float(exact_match_score(pred, t)) for t in texts)
            f1[qid] = max(f1_score(pred, t) for t in texts)
    return exact, f1, has_ans, missing


def evaluate_predictions(
    dataset_json: Mapping[str, Any] | list[Any],
    predictions: Mapping[str, str],
    *,
    version: str | None = None,
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
    abstain_thresh: float = 0.0,
) -> dict[str, Any]:
    """Official EM and F1 (percent) of ``predictions`` (question id -> answer text) over every
    question of ``dataset_json``. ``version`` ("v1.1"/"v2.0") defaults to the file's own.

    Keys: ``exact_match``, ``f1``, ``total``, ``answered``, ``missing`` (questions with no
    prediction, scored 0), ``unknown`` (predictions for ids not in the gold file, ignored),
    ``missing_examples``; for v2.0 also ``has_ans_exact``, ``has_ans_f1``, ``has_ans_total``,
    ``no_ans_exact``, ``no_ans_f1``, ``no_ans_total``, and with ``na_probs`` (question id ->
    no-answer score, higher = more likely unanswerable; one for every question with a
    prediction, none NaN, else a NoAnswerScoreError) the official ``best_exact``,
    ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh``. As in the v2.0 script, a question
    whose no-answer score is above ``na_prob_thresh`` then counts as answered with nothing in
    every other key (with scores in [0, 1] and the default 1.0, never). ``abstain_thresh`` is
    the threshold reported when abstaining everywhere is best: the official 0.0 suits scores in
    [0, 1]; for scores that may be negative (log-odds), pass one below them all.
    """
    check_arguments(dataset_json, predictions)
    version = version or _version(dataset_json)
    if version not in ("v1.1", "v2.0"):
        raise ValueError(f"version must be 'v1.1' or 'v2.0', not {version!r}")
    if na_probs is not None and version != "v2.0":
        raise ValueError("no-answer scores are for SQuAD v2.0; v1.1 has no unanswerable questions")
    exact, f1, has_ans, missing = score_questions(dataset_json, predictions, version)
    raw_exact, raw_f1 = exact, f1
    if na_probs is not None:  # a question with no prediction stays at 0 whatever its score
        check_na_probs(na_probs, [qid for qid in exact if qid in predictions])
        scored = {qid: p for qid, p in na_probs.items() if qid in predictions}
        exact, f1 = (
            apply_no_ans_threshold(scores, scored, has_ans, na_prob_thresh)
            for scores in (exact, f1)
        )
    out: dict[str, Any] = {"version": version, **_summary(exact, f1, list(exact), "")}
    out["exact_match"] = out.pop("exact")
    out |= {
        "answered": len(exact) - len(missing),
        "missing": len(missing),
        "unknown": sum(1 for k in predictions if k not in exact),
        "missing_examples": missing[:10],
    }
    if version == "v2.0":  # as the v2.0 script, a part with no question is left out
        for part, answerable in (("has_ans_", True), ("no_ans_", False)):
            if ids := [k for k, v in has_ans.items() if v == answerable]:
                out |= _summary(exact, f1, ids, part)
        if na_probs is not None:
            for name, scores in (("exact", raw_exact), ("f1", raw_f1)):
                best, thresh = find_best_thresh(
                    predictions, scores, na_probs, has_ans, abstain_thresh
                )
                out |= {f"best_{name}": best, f"best_{name}_thresh": thresh}
    return out


def check_arguments(dataset_json: object, predictions: object) -> None:
    """A TypeError, naming the question, unless ``evaluate_predictions`` was given the SQuAD
    JSON itself and a mapping of question id -> answer text (not ``predict``'s result dicts)."""
    if not isinstance(dataset_json, Mapping | list):
        path = " (load_gold reads a file)" if isinstance(dataset_json, str | Path) else ""
        raise TypeError(
            f"dataset_json is a {type(dataset_json).__name__}: give the SQuAD JSON object{path}"
        )
    if not isinstance(predictions, Mapping):
        raise TypeError(
            f"predictions is a {type(predictions).__name__}: give a dict of question id -> "
            "answer text"
        )
    for qid, answer in predictions.items():
        if not isinstance(answer, str):
            raise TypeError(
                f"the prediction for {qid!r} is a {type(answer).__name__}, not the answer text"
            )


def apply_no_ans_threshold(
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_ans: Mapping[str, bool],
    threshold: float,
) -> dict[str, float]:
    """The v2.0 script's: a question whose no-answer score is above ``threshold`` scores as an
    empty answer (1 if unanswerable, else 0); a question missing from ``na_probs`` keeps its
    score (the official script fails on it)."""
    return {
        qid: float(not has_ans[qid]) if na_probs.get(qid, -math.inf) > threshold else s
        for qid, s in scores.items()
    }


class NoAnswerScoreError(ValueError):
    """No-answer scores that cannot be searched: one missing for an answered question, or NaN."""


def check_na_probs(na_probs: Mapping[str, float], answered: list[str]) -> None:
    """A NoAnswerScoreError unless every question of ``answered`` has a no-answer score and
    no score is NaN (the official script fails on a missing one; NaN has no order to sort by)."""
    nan = [qid for qid, p in na_probs.items() if math.isnan(p)]
    if nan:
        raise NoAnswerScoreError(
            f"the no-answer score of {len(nan)} question(s) is NaN (e.g. {', '.join(nan[:3])})"
        )
    lacking = [qid for qid in answered if qid not in na_probs]
    if lacking:
        raise NoAnswerScoreError(
            f"no no-answer score for {len(lacking)} of the {len(answered)} questions with a "
            f"prediction (e.g. {', '.join(lacking[:3])}): the threshold search needs one for each"
        )


def find_best_thresh(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_ans: Mapping[str, bool],
    abstain_thresh: float = 0.0,
) -> tuple[float, float]:
    """The official v2.0 search: answer the questions whose no-answer score is at most the
    threshold, abstain on the rest; the best total (percent) and its threshold.

    Questions go in order of ``na_probs``; abstaining scores 1 on an unanswerable question and
    answering scores its ``scores`` entry (an answer to an unanswerable one scores 0, so a
    non-empty prediction there costs the 1). A question with no prediction scores 0 at every
    threshold, as everywhere in ``evaluate_predictions`` (the official script counts an
    unanswerable one as a right abstention, so a partial file could beat a complete one);
    questions without a score are skipped.
    """
    current = best = float(sum(1 for k, v in has_ans.items() if not v and k in predictions))
    threshold = abstain_thresh
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores or qid not in predictions:
            continue
        if has_ans[qid]:
            current += scores[qid]
        elif predictions.get(qid):
            current -= 1
        if current > best:
            best, threshold = current, na_probs[qid]
    return 100.0 * best / len(scores), threshold


def _summary(
    exact: dict[str, float], f1: dict[str, float], ids: list[str], prefix: str
) -> dict[str, Any]:
    n = len(ids)
    return {
        f"{prefix}exact": 100.0 * sum(exact[k] for k in ids) / n if n else 0.0,
        f"{prefix}f1": 100.0 * sum(f1[k] for k in ids) / n if n else 0.0,
        f"{prefix}total": n,
    }


# --- files -------------------------------------------------------------------------------


class PredictionFileError(ValueError):
    """A predictions file that is not a JSON object of question id -> answer text."""

    def __init__(
        self, message: str, source: str | Path, line: int | None = None, column: int | None = None
    ):
        self.source, self.line, self.column, self.reason = str(source), line, column, message
        where = f"{source}:{line}:{column}" if line is not None else str(source)
        super().__init__(f"{where}: {message}")


def _parse(text: str, source: Path, error: type[ValueError]) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        if error is SquadFormatError:
            raise SquadFormatError(err.msg, source, line=err.lineno, column=err.colno) from None
        raise PredictionFileError(err.msg, source, err.lineno, err.colno) from None
    except (RecursionError, ValueError) as err:  # nested too deeply; an integer too long
        raise error(json_beyond_syntax(err), source) from None


def load_gold(path: str | Path) -> dict[str, Any]:
    """A SQuAD file (``.json`` or ``.json.gz``), checked to have gold answers for scoring."""
    path = Path(path)
    dataset = _parse(read_json_text(path), path, SquadFormatError)
    if not isinstance(dataset, dict):
        raise SquadFormatError("the top level is not a JSON object", path)
    if not gold_answers(dataset, str(path)):
        raise SquadFormatError("no question to score against", path)
    return dataset


def load_predictions(path: str | Path) -> dict[str, str]:
    """The official predictions format: one JSON object, question id -> answer text."""
    path = Path(path)
    preds = _load_object(path, "answer text")
    for qid, answer in preds.items():
        if not isinstance(answer, str):
            raise PredictionFileError(f"the prediction for {qid!r} is not a string", path)
    return preds


def load_na_probs(path: str | Path) -> dict[str, float]:
    """The official no-answer file: one JSON object, question id -> no-answer score."""
    path = Path(path)
    scores = _load_object(path, "no-answer score")
    for qid, value in scores.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
            raise PredictionFileError(f"the no-answer score for {qid!r} is not a number", path)
    return {qid: float(v) for qid, v in scores.items()}


def _load_object(path: Path, values: str) -> dict[str, Any]:
    """A JSON object {question id: ``values``} from a file, or a PredictionFileError. A question
    id given twice is an error: JSON readers keep one of the two values without a word."""
    try:
        text = read_json_text(path)
    except SquadFormatError as err:
        raise PredictionFileError(err.reason, path, err.line, err.column) from None
    twice: list[str] = []

    def pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # Called for each object as it closes, the top level's last: what it leaves in
        # ``twice`` are that object's repeated keys.
        twice.clear()
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                twice.append(key)
            seen.add(key)
        return dict(pairs)

    try:
        found = json.loads(text, object_pairs_hook=pairs_to_dict)
    except json.JSONDecodeError as err:
        why = err.msg
        if why == "Extra data":  # JSON lines, say `treeqa predict qa --output`
            why += f" (expected one JSON object {{question id: {values}}}, not one a line)"
        raise PredictionFileError(why, path, err.lineno, err.colno) from None
    except (RecursionError, ValueError) as err:  # nested too deeply; an integer too long
        raise PredictionFileError(json_beyond_syntax(err), path) from None
    if not isinstance(found, dict):
        raise PredictionFileError(f"expected a JSON object {{question id: {values}}}", path)
    if twice:
        raise PredictionFileError(f"question id {twice[0]!r} is given twice", path)
    return found
