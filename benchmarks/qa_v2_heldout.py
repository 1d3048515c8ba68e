"""A SQuAD 2.0 checkpoint on v2.0 dev with a no-answer threshold chosen on held-in questions.

The official best-threshold search picks the threshold on the very questions it then scores,
so its ``best_f1`` is an upper bound. Here the threshold is chosen on the dev sample that the
run's in-training evaluation scored (``data.dev_subset`` questions, drawn with the run's seed:
``recipes.qa.dev_sample``) and applied to every other dev question. Printed for the held-out
questions: F1 at that threshold, at the checkpoint's own threshold, abstaining on every
question, and the official upper bound; F1 over the whole dev set at the checkpoint's
threshold; and how well the no-answer margins rank v2.0's unanswerable questions above the
answerable ones (AUC, 0.5 = no signal). Example:

    python benchmarks/qa_v2_heldout.py --checkpoint runs/qanet_v2/run/last.safetensors \\
        --prepared runs/squad_v2neg --json runs/qanet_v2/heldout.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from qa_negatives_probe import auc
from treeqa.data.squad_prepared import PreparedSplit
from treeqa.eval.squad import gold_answers
from treeqa.recipes.qa import (
    Answer,
    dev_sample,
    gold_subset,
    load_model,
    official_scores,
    predict_rows,
)


def at_threshold(answers: dict[str, Answer], threshold: float) -> dict[str, Answer]:
    """The answers a threshold gives: "" where the no-answer margin beats it."""
    return {
        q: a._replace(text="" if a.no_answer_margin > threshold else a.span)
        for q, a in answers.items()
    }


def abstain_f1(scores: dict[str, float]) -> float:
    """F1 of answering no question: the share of unanswerable questions."""
    return 100.0 * scores["no_ans_total"] / scores["total"]


def choose_threshold(gold: dict[str, Any], answers: dict[str, Answer]) -> tuple[float, float]:
    """The official search's threshold on these questions and its F1. The search starts from
    abstaining everywhere at threshold 0 (made for probabilities); with margins, abstaining
    everywhere is threshold -inf, so that is what a search that found nothing better gives."""
    scores = official_scores(gold, answers)
    abstain = abstain_f1(scores)
    if scores["best_f1"] <= abstain:
        return -math.inf, abstain
    return scores["best_f1_thresh"], scores["best_f1"]


def margin_auc(gold: dict[str, Any], answers: dict[str, Answer]) -> float:
    """AUC of the no-answer margins: v2.0's unanswerable questions against the answerable ones."""
    unanswerable = {q for q, texts in gold_answers(gold) if not texts}
    neg = [a.no_answer_margin for q, a in answers.items() if q in unanswerable]
    pos = [a.no_answer_margin for q, a in answers.items() if q not in unanswerable]
    return auc(neg, pos)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="run directory or checkpoint file")
    parser.add_argument("--prepared", required=True, type=Path, help="prepared SQuAD 2.0 dev")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()

    loaded = load_model(args.checkpoint)
    split = PreparedSplit(args.prepared, "dev")
    data, seed = loaded.meta["data"], loaded.meta["train_config"]["seed"]
    rows = dev_sample(len(split), int(data["dev_subset"]), int(seed))
    if rows is None:
        raise SystemExit(f"{args.checkpoint}: the run scored every dev question; none is held out")
    # Every question's best span and no-answer margin (threshold +inf: the span is the text).
    answers = predict_rows(loaded.model, split, None, args.batch_size, math.inf)
    gold = split.gold()
    held_in = {split.question_id(int(r)) for r in rows}
    held_out = set(answers) - held_in
    threshold, held_in_f1 = choose_threshold(
        gold_subset(gold, held_in), {q: answers[q] for q in held_in}
    )
    rest_gold, rest = gold_subset(gold, held_out), {q: answers[q] for q in held_out}
    chosen = official_scores(rest_gold, at_threshold(rest, threshold))
    own = official_scores(rest_gold, at_threshold(rest, loaded.threshold))
    everything = official_scores(gold, at_threshold(answers, loaded.threshold))
    result = {
        "checkpoint": str(args.checkpoint),
        "step": loaded.meta.get("step"),
        "held_in_questions": len(held_in),
        "held_out_questions": len(held_out),
        "threshold_chosen": threshold,
        "held_in_f1_at_chosen": held_in_f1,
        "held_out_at_chosen": chosen,
        "held_out_at_checkpoint_threshold": own,
        "held_out_abstain_f1": abstain_f1(chosen),
        "held_out_best_f1_upper_bound": own["best_f1"],
        "dev_at_checkpoint_threshold": everything,
        "dev_margin_auc": margin_auc(gold, answers),
    }
    print(f"{args.checkpoint} (step {result['step']}), SQuAD 2.0 dev:")
    print(
        f"  threshold chosen on {len(held_in)} held-in questions: {threshold:.4g}"
        f" (F1 there {held_in_f1:.2f})"
    )
    print(f"  {len(held_out)} held-out questions:")
    for name, s in (("chosen threshold", chosen), (f"threshold {loaded.threshold:g}", own)):
        print(
            f"    {name:<18} EM {s['exact_match']:.2f} F1 {s['f1']:.2f}"
            f" (HasAns F1 {s['has_ans_f1']:.2f}, NoAns {s['no_ans_exact']:.2f})"
        )
    print(f"    abstain everywhere F1 {result['held_out_abstain_f1']:.2f}")
    print(f"    official best F1   {own['best_f1']:.2f} (upper bound: chosen on these questions)")
    print(
        f"  all {len(answers)} dev questions, threshold {loaded.threshold:g}:"
        f" EM {everything['exact_match']:.2f} F1 {everything['f1']:.2f}"
    )
    print(f"  no-answer margin AUC, unanswerable vs answerable: {result['dev_margin_auc']:.3f}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
