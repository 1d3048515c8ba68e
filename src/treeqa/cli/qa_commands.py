"""What ``treeqa train qa`` and ``treeqa predict qa`` run: QANet on prepared SQuAD.

Imports stay light here (argparse only); torch and spaCy load when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from treeqa.cli import flags
from treeqa.cli.common import STRICT_STOP, check_out, emit_json, exit_code


def _config(args: argparse.Namespace) -> Any:
    from treeqa.config import load_toml, parse_overrides
    from treeqa.recipes.qa import resolve_config

    source = args.resume / "config.toml" if args.resume is not None else args.config
    raw = load_toml(source) if source else {}
    named = flags.named_overrides(args, flags.config_flags("qa"))
    return resolve_config(raw, named + parse_overrides(args.overrides), len(named))


def train_main(args: argparse.Namespace) -> int:
    from treeqa.recipes.qa import train
    from treeqa.train.distributed import World

    check_out(args)
    config = _config(args)
    out = args.resume or args.out or Path("runs") / config.name
    result = train(config, out, resume_run=args.resume is not None)
    if not World.from_env().main:  # under torchrun, process 0 reports
        return STRICT_STOP if result["aborted"] else 0
    print(
        f"run directory: {out}\nbest dev f1: {result['best_dev']:.2f} (epoch {result['best_epoch']})"
    )
    if args.json:
        emit_json({"run_dir": str(out), **result})
    return exit_code(result, out)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSONL items with a context and a question; blank lines are skipped (so each item's
    other fields, an "id" say, come back with its answer)."""
    items = []
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
                item = json.loads(line) if line.strip() else None
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}:{n}: not UTF-8 text ({err.reason})") from err
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: invalid JSON: {err.msg}") from err
            if item is None:
                continue
            if not isinstance(item, dict):
                raise ValueError(f'{path}:{n}: expected {{"context": ..., "question": ...}}')
            for key in ("context", "question"):
                if not isinstance(item.get(key), str) or not item[key].strip():
                    raise ValueError(f"{path}:{n}: field {key!r}: expected a non-empty string")
            items.append(item)
    return items


def predict_main(args: argparse.Namespace) -> int:
    items: list[dict[str, Any]] = []
    if args.context is not None or args.question is not None:
        if not (args.context or "").strip() or not (args.question or "").strip():
            raise ValueError("give both --context and --question, each with some text")
        items.append({"context": args.context, "question": args.question})
    if args.input:
        items += _read_jsonl(args.input)
    if not items:
        raise ValueError("nothing to answer: give --context and --question, or --input FILE.jsonl")
    from treeqa.recipes.qa import load_model, predict

    results = predict(load_model(args.checkpoint), [(x["context"], x["question"]) for x in items])
    # Each answer line carries its input's fields but the context (an "id", say).
    lines = [
        {**{k: v for k, v in x.items() if k != "context"}, **r}
        for x, r in zip(items, results, strict=True)
    ]
    if args.output:
        with args.output.open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        print(f"wrote {len(results)} answers to {args.output}", file=sys.stderr)
        return 0
    for line, r in zip(lines, results, strict=True):
        if args.json or args.input:
            print(json.dumps(line, ensure_ascii=False))
        else:
            answer = r["answer"] if r["start"] >= 0 else "(no answer)"
            print(f"{answer}\t(score {r['score']:.4f}, characters {r['start']}-{r['end']})")
    return 0
