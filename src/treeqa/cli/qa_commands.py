"""What ``treeqa train qa`` and ``treeqa predict qa`` run: QANet on prepared SQuAD.

Imports stay light here (argparse only); torch and spaCy load when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from treeqa.cli import flags
from treeqa.cli.common import (
    STDIN,
    check_out,
    check_output,
    json_line,
    one_line,
    output_file,
    report_run,
    run_dir,
    say_if_amp_does_nothing,
    summary_if_interrupted,
    unicode_stdout,
)


def _config(args: argparse.Namespace) -> Any:
    from treeqa.recipes.qa import resolve_config

    source = args.resume / "config.toml" if args.resume is not None else args.config
    named = flags.named_overrides(args, flags.config_flags("qa"))
    return flags.resolve_file(resolve_config, source, named, args.overrides)


def train_main(args: argparse.Namespace) -> int:
    from treeqa.recipes.qa import train

    check_out(args)
    config = _config(args)
    say_if_amp_does_nothing(args, config.train)
    out = run_dir(args, config.name)
    with summary_if_interrupted(args, out):
        result = train(config, out, resume_run=args.resume is not None)
    return report_run(args, out, result, "f1", ".2f")


def _lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in a JSON value's strings and keys ("\\ud800" in JSON, or
    bytes on the command line that are not UTF-8), which no UTF-8 output can hold, as U+XXXX;
    None when there is none."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            return f"U+{ord(value[err.start]):04X}"
        return None
    parts = [*value, *value.values()] if isinstance(value, dict) else value
    for part in parts if isinstance(value, dict | list) else []:
        found = _lone_surrogate(part)
        if found is not None:
            return found
    return None


def _read_jsonl(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(``path:line``, item) for the JSONL items with a context and a question; blank lines
    are skipped (so each item's other fields, an "id" say, come back with its answer)."""
    from treeqa.data.squad import finite_float, json_beyond_syntax, no_constant, unique_keys

    def parse(line: str) -> Any:
        """One line's JSON, strictly: no duplicate key, NaN or infinity (to be echoed back)."""
        return json.loads(
            line,
            object_pairs_hook=unique_keys,
            parse_constant=no_constant,
            parse_float=finite_float,
        )

    items = []
    name = "<stdin>" if path == STDIN else str(path)
    n = 0
    with sys.stdin.buffer if path == STDIN else path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")  # a first-line BOM
                item = parse(line) if line.strip() else None
            except UnicodeDecodeError as err:
                raise ValueError(f"{name}:{n}: not UTF-8 text ({err.reason})") from err
            except json.JSONDecodeError as err:
                raise ValueError(f"{name}:{n}: invalid JSON: {err.msg}") from err
            except KeyError as err:
                raise ValueError(f"{name}:{n}: field {err.args[0]!r} is given twice") from err
            except (RecursionError, ValueError) as err:  # deep nesting; NaN or 1e999 (no JSON out)
                raise ValueError(f"{name}:{n}: {json_beyond_syntax(err)}") from None
            if item is None:
                continue
            if not isinstance(item, dict):
                raise ValueError(f'{name}:{n}: expected {{"context": ..., "question": ...}}')
            for key in ("context", "question"):
                if not isinstance(item.get(key), str) or not item[key].strip():
                    raise ValueError(f"{name}:{n}: field {key!r}: expected a non-empty string")
            for key, value in item.items():
                surrogate = _lone_surrogate(value)
                if surrogate is not None:
                    raise ValueError(
                        f"{name}:{n}: field {key!r}: a lone surrogate ({surrogate}) is not text"
                    )
            items.append((f"{name}:{n}", item))
    if not items:
        raise ValueError(f"{name}: no questions in it ({'blank lines only' if n else 'empty'})")
    return items


class AnswerLines:
    """Answers' JSON lines: each its input's fields but the context (an "id", say), then the
    answer's. An input field the answer also writes (a gold "answer") is kept apart, under
    "input" ("_input" where the input has an "input" field of its own), and ``note`` says so."""

    def __init__(self) -> None:
        self.moved: set[str] = set()  # the input fields kept apart, on any line
        self.under: set[str] = set()  # where
        self.lines = 0  # lines with any

    def line(self, given: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in given.items() if k != "context"}
        clash = {k: kept.pop(k) for k in list(kept) if k in answer}
        if not clash:
            return {**kept, **answer}
        under = "input"
        while under in kept or under in answer:
            under = "_" + under
        self.moved |= set(clash)
        self.under.add(under)
        self.lines += 1
        return {**kept, under: clash, **answer}

    def note(self) -> str:
        """What was kept apart, once all lines are written ("" for nothing)."""
        if not self.lines:
            return ""
        names = ", ".join(repr(k) for k in sorted(self.moved))
        where = " or ".join(f'"{u}"' for u in sorted(self.under, key=len))
        return (
            f"NOTE: the input's {names}, which the answers write too, kept under {where} "
            f"({self.lines} line{'s' if self.lines > 1 else ''})"
        )


def _answers(
    loaded: Any, items: list[tuple[str, dict[str, Any]]], batch_size: int = 16
) -> Iterator[dict[str, Any]]:
    """Each item's answer, in order, a batch at a time. An item ``predict`` refuses (a context
    too long, say) stops the stream with an error naming its source, after the answers to the
    items before it."""
    from treeqa.data.squad import Tokenizer
    from treeqa.recipes.qa import predict

    tokenizer = Tokenizer()
    for at in range(0, len(items), batch_size):
        chunk = items[at : at + batch_size]
        try:
            results = predict(
                loaded, [(x["context"], x["question"]) for _, x in chunk], tokenizer=tokenizer
            )
        except ValueError:  # one at a time, to answer those before the one refused
            results = []
            for where, x in chunk:
                try:
                    results += predict(loaded, [(x["context"], x["question"])], tokenizer=tokenizer)
                except ValueError as err:
                    yield from results
                    raise ValueError(f"{where}: {err}") from None
        yield from results


def _text_line(r: dict[str, Any]) -> str:
    """One answer for the terminal: the answer and where it is, or that there is none."""
    if r["start"] < 0:
        best = json.dumps(one_line(r["best_span"]), ensure_ascii=False)
        return (
            f"(no answer)\t(score {r['score']:.4f}, no-answer margin "
            f"{r['no_answer_margin']:.4f}; best span {best})"
        )
    return f"{one_line(r['answer'])}\t(score {r['score']:.4f}, characters {r['start']}-{r['end']})"


def predict_main(args: argparse.Namespace) -> int:
    check_output(args)
    items: list[tuple[str, dict[str, Any]]] = []
    if args.context is not None or args.question is not None:
        if not (args.context or "").strip() or not (args.question or "").strip():
            raise ValueError("give both --context and --question, each with some text")
        for flag, text in (("--context", args.context), ("--question", args.question)):
            if _lone_surrogate(text) is not None:
                raise ValueError(f"{flag}: not UTF-8 text (bytes that are not UTF-8)")
        items.append(("<command line>", {"context": args.context, "question": args.question}))
    if args.input:
        items += _read_jsonl(args.input)
    if not items:
        raise ValueError("nothing to answer: give --context and --question, or --input FILE.jsonl")
    from treeqa.recipes.qa import load_model

    loaded = load_model(args.checkpoint)
    written, lines = 0, AnswerLines()
    try:
        with output_file(args.output) as out:
            for (_, x), r in zip(items, _answers(loaded, items), strict=True):
                line = lines.line(x, r)
                if out is not None:
                    out.write(json_line(line) + "\n")
                elif args.json or args.input:
                    print(json_line(line, ascii=not unicode_stdout()), flush=True)
                else:
                    print(_text_line(r), flush=True)
                written += 1
    except ValueError as err:
        if out is not None:
            if written == 0:
                kept = f"{args.output} holds no answers"
            elif written == 1:
                kept = f"the answer before it is in {args.output}"
            else:
                kept = f"the {written} answers before it are in {args.output}"
            raise ValueError(f"{err} ({kept})") from None
        raise
    finally:
        if lines.note():
            print(lines.note(), file=sys.stderr)
    if out is not None:
        print(f"wrote {written} answers to {args.output}", file=sys.stderr)
    return 0
