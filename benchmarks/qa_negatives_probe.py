"""Has a SQuAD 2.0 model learned the unanswerable questions it was trained on?

A model trained with ``--negatives same_article`` sees unanswerable examples made by pairing a
v1.1 question with another paragraph of its article. This probe builds the same kind of
examples from a held-out file (v1.1 dev): a seeded sample of questions, each once with its own
paragraph and once with another paragraph of the same article (unanswerable), answers them
with the checkpoint (``recipes.qa.predict``: raw text, the checkpoint's vocabulary) and scores
them with the official v2.0 metric (HasAns / NoAns at the checkpoint's threshold, and the
best threshold over the no-answer margins). Writes the made gold file, the predictions and the
margins to ``--out``, so that ``treeqa evaluate qa --gold OUT/gold.json --predictions
OUT/predictions.json --na-probs OUT/na_probs.json`` scores them again. Example:

    python benchmarks/qa_negatives_probe.py --checkpoint runs/qanet_v2/run \\
        --squad "$TREEQA_DATA/squad/dev-v1.1.reconstructed.json.gz" --questions 1000 --out runs/probe
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from treeqa.data.squad import iter_articles
from treeqa.recipes.qa import Answer, load_model, official_scores, predict


def made_pairs(path: str, questions: int, seed: int) -> list[dict[str, Any]]:
    """Sampled questions, each with its own paragraph and with another one of its article."""
    rng = np.random.default_rng(seed)
    items = []
    for article in iter_articles(path):
        contexts = [p.context for p in article.paragraphs]
        for pi, paragraph in enumerate(article.paragraphs):
            for q in paragraph.questions:
                items.append((contexts, pi, q))
    rows = []
    for k in rng.permutation(len(items))[:questions]:
        contexts, pi, q = items[k]
        answers = [{"text": a.text, "answer_start": a.start} for a in q.answers]
        rows.append({"id": q.id, "context": contexts[pi], "question": q.text, "answers": answers})
        others = [p for p in range(len(contexts)) if p != pi]
        if others:
            other = contexts[others[int(rng.integers(len(others)))]]
            rows.append({"id": q.id + "#neg", "context": other, "question": q.text, "answers": []})
    return rows


def margin_auc(answers: dict[str, Answer]) -> float:
    """How well the no-answer margins rank the made negatives above the answerable questions:
    the chance that a random negative's margin beats a random answerable one's (0.5 = none)."""
    neg = [a.no_answer_margin for q, a in answers.items() if q.endswith("#neg")]
    pos = [a.no_answer_margin for q, a in answers.items() if not q.endswith("#neg")]
    return auc(neg, pos)


def auc(negatives: list[float], positives: list[float]) -> float:
    """The chance that a random unanswerable question's margin beats a random answerable one's."""
    neg, pos = np.array(negatives), np.array(positives)
    wins = (neg[:, None] > pos[None, :]).sum() + 0.5 * (neg[:, None] == pos[None, :]).sum()
    return float(wins / (len(neg) * len(pos)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", required=True, help="run directory or checkpoint file")
    parser.add_argument("--squad", required=True, help="a SQuAD v1.1 file (.json or .json.gz)")
    parser.add_argument("--questions", type=int, default=1000, help="questions sampled")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="directory to write")
    args = parser.parse_args()

    rows = made_pairs(args.squad, args.questions, args.seed)
    loaded = load_model(args.checkpoint, device="cpu")
    if not loaded.model.config.no_answer:
        raise SystemExit(f"{args.checkpoint}: a SQuAD v1.1 model, it has no no-answer score")
    results = predict(loaded, [(r["context"], r["question"]) for r in rows], batch_size=32)
    answers = {
        r["id"]: Answer(a["answer"], math.log(a["score"]), a["best_span"], a["no_answer_margin"])
        for r, a in zip(rows, results, strict=True)
    }
    paragraphs = [
        {
            "context": r["context"],
            "qas": [
                {"id": r["id"], "question": r["question"], "answers": r["answers"]}
                | {"is_impossible": not r["answers"]}
            ],
        }
        for r in rows
    ]
    gold = {"version": "v2.0", "data": [{"title": "probe", "paragraphs": paragraphs}]}
    args.out.mkdir(parents=True, exist_ok=True)
    for name, value in (
        ("gold.json", gold),
        ("predictions.json", {q: a.text for q, a in answers.items()}),
        ("na_probs.json", {q: a.no_answer_margin for q, a in answers.items()}),
    ):
        (args.out / name).write_text(json.dumps(value), encoding="utf-8")
    scores = official_scores(gold, answers)
    scores["margin_auc"] = margin_auc(answers)
    print(json.dumps({"checkpoint": str(args.checkpoint), "pairs": len(rows), **scores}))


if __name__ == "__main__":
    main()
