"""``treeqa predict qa`` as a user meets it: JSONL in and out, errors that name the line and
keep the answers before it, standard input, text no UTF-8 output can hold, and offsets that
point at the answer in any script."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("spacy")

from treeqa.cli.main import main  # noqa: E402

CONTEXTS = [
    (
        "Paris is the capital of France. The Seine flows through Paris.",
        "What river flows?",
        "Seine",
    ),
    ("The cat sat on the mat in 1999. The dog slept in the garden.", "When did it sit?", "1999"),
    ("Water boils at 100 degrees. Ice melts at zero degrees.", "What melts?", "Ice"),
]
TINY = ["--model.d_model=16", "--model.heads=2", "--model.char_dim=8", "--model.emb_convs=1",
        "--model.model_blocks=1", "--model.model_convs=1", "--train.batch_size=3",
        "--train.epochs=1", "--schedule.eval_every=3", "--train.ema_decay=0.9",
        "--train.device=cpu", "--train.health=off"]  # fmt: skip


def train_tiny(root: Path, version: str, *extra: str) -> Path:
    """A tiny QANet trained for three steps on the paragraphs above (SQuAD ``version``)."""
    from treeqa.data.squad import Tokenizer
    from treeqa.data.squad_prepare import prepare_squad

    root.mkdir(parents=True, exist_ok=True)
    qas: list[dict[str, Any]] = []
    data = {"version": version, "data": []}
    for n, (context, question, answer) in enumerate(CONTEXTS):
        qas = [{"id": f"q{n}", "question": question,
                "answers": [{"text": answer, "answer_start": context.index(answer)}]}]  # fmt: skip
        if version == "v2.0":
            qas[0]["is_impossible"] = False
            qas.append({"id": f"u{n}", "question": "Who?", "answers": [], "is_impossible": True})
        data["data"].append({"title": f"t{n}", "paragraphs": [{"context": context, "qas": qas}]})
    (root / "squad.json").write_text(json.dumps(data), encoding="utf-8")
    tokens = {t for c, q, _ in CONTEXTS for text in (c, q) for t in Tokenizer().tokenize(text)[0]}
    rng = np.random.default_rng(0)
    (root / "vectors.txt").write_text(
        "".join(
            f"{t} {' '.join(f'{x:.3f}' for x in rng.normal(size=4))}\n" for t in sorted(tokens)
        ),
        encoding="utf-8",
    )
    squad = root / "squad.json"
    prepare_squad(squad, squad, root / "vectors.txt", root / "prepared", vectors_cache=root / "c")
    argv = ["train", "qa", f"--prepared={root / 'prepared'}", f"--out={root / 'run'}", *TINY]
    assert main([*argv, *extra]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny(tmp_path_factory.mktemp("qa"), "1.1")


def predict(run: Path, *argv: str) -> list[str]:
    return ["predict", "qa", "--checkpoint", str(run), *argv]


def jsonl(path: Path, *items: dict[str, Any] | str) -> Path:
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in items),
        encoding="utf-8",
    )
    return path


def test_a_line_refused_is_named_and_the_answers_before_it_are_kept(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    context, question, _ = CONTEXTS[0]
    # Far past the 400 training tokens and 50 question tokens: still answered.
    long_context = " ".join([context] * 50)  # 650 tokens
    long_question = " ".join(["which"] * 80) + " river?"
    src = jsonl(
        tmp_path / "in.jsonl",
        {"id": "a", "context": context, "question": question},
        "",
        {"id": "b", "context": long_context, "question": long_question},
        {"id": "c", "context": "word " * 2100, "question": question},
        {"id": "d", "context": context, "question": question},
    )
    out = tmp_path / "out.jsonl"
    assert main(predict(run, "--input", str(src), "--output", str(out))) == 2
    assert capsys.readouterr().err == (
        f"treeqa predict qa: error: {src}:4: a context of 2100 tokens; this reads at most 2000 at "
        "once (time grows with the square of the length): give it one passage at a time (the 2 "
        f"answers before it are in {out})\n"
    )
    answers = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [a["id"] for a in answers] == ["a", "b"]
    assert long_context[answers[1]["start"] : answers[1]["end"]] == answers[1]["answer"] != ""
    # Printed, the same answers come out before the error.
    assert main(predict(run, "--input", str(src))) == 2
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == answers
    assert f"{src}:4: a context of 2100 tokens" in captured.err
    # The first line refused: nothing answered, and the output says so.
    first = jsonl(tmp_path / "first.jsonl", {"context": "word " * 2100, "question": question})
    assert main(predict(run, "--input", str(first), "--output", str(out))) == 2
    assert capsys.readouterr().err.endswith(f"at a time ({out} holds no answers)\n")
    assert out.read_text(encoding="utf-8") == ""


def test_a_context_or_question_with_nothing_visible_is_refused_as_empty(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    context, question, _ = CONTEXTS[0]
    nothing = "\u200b\u200b\u200c \ufeff\u2060\x00\u00ad"  # was: answered, an invisible span
    why = "with no visible character (only whitespace, zero-width or control characters)"
    for field, item in (
        ("context", {"context": nothing, "question": question}),
        ("question", {"context": context, "question": nothing}),
    ):
        src = jsonl(tmp_path / "in.jsonl", {"id": "a", "context": context, "question": question},
                    {"id": "b", **item})  # fmt: skip
        out = tmp_path / "out.jsonl"
        assert main(predict(run, "--input", str(src), "--output", str(out))) == 2
        assert capsys.readouterr().err == (
            f"treeqa predict qa: error: {src}:2: a {field} {why} (the answer before it is in {out})\n"
        )
        assert [json.loads(x)["id"] for x in out.read_text(encoding="utf-8").splitlines()] == ["a"]
        assert main(predict(run, *(f"--{k}={v}" for k, v in item.items()))) == 2
        err = capsys.readouterr().err
        assert err == f"treeqa predict qa: error: <command line>: a {field} {why}\n"


def test_text_no_utf8_output_can_hold_is_refused_naming_where(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    context, question, _ = CONTEXTS[0]
    for field, item in (
        ("context", {"context": context + "\ud800", "question": question}),
        ("id", {"id": "x\udfff", "context": context, "question": question}),
    ):
        src = tmp_path / "in.jsonl"
        src.write_text(
            json.dumps({"context": context, "question": question}) + "\n" + json.dumps(item) + "\n"
        )
        assert main(predict(run, "--input", str(src))) == 2
        assert capsys.readouterr().err.startswith(
            f"treeqa predict qa: error: {src}:2: field {field!r}: a lone surrogate (U+D"
        )
    # Bytes on the command line that are not UTF-8 reach Python as lone surrogates.
    assert main(predict(run, "--context", "Paris \udcff is big.", "--question", question)) == 2
    assert capsys.readouterr().err == (
        "treeqa predict qa: error: --context: not UTF-8 text (bytes that are not UTF-8)\n"
    )


def test_standard_input_and_an_input_with_no_questions(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    context, question, _ = CONTEXTS[0]
    line = json.dumps({"id": 7, "context": context, "question": question}) + "\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(line.encode())))
    assert main(predict(run, "--input", "-")) == 0
    [answer] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert answer["id"] == 7 and context[answer["start"] : answer["end"]] == answer["answer"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n \n")))
    assert main(predict(run, "--input", "-")) == 2
    assert capsys.readouterr().err == (
        "treeqa predict qa: error: <stdin>: no questions in it (blank lines only)\n"
    )
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main(predict(run, "--input", "-")) == 2
    assert (
        capsys.readouterr().err == "treeqa predict qa: error: <stdin>: no questions in it (empty)\n"
    )


def test_an_input_field_the_answer_also_writes_is_kept_apart(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gold "answer" in the input is not overwritten by the predicted one."""
    context, question, gold = CONTEXTS[0]
    src = jsonl(
        tmp_path / "in.jsonl",
        {"id": "a", "context": context, "question": question, "answer": gold, "score": 1},
        {"id": "b", "context": context, "question": question, "input": "mine"},
        {"id": "c", "context": context, "question": question, "input": "mine", "end": 3},
    )
    assert main(predict(run, "--input", str(src))) == 0
    captured = capsys.readouterr()
    first, second, third = [json.loads(x) for x in captured.out.splitlines()]
    assert first["input"] == {"answer": gold, "score": 1} and first["id"] == "a"
    assert context[first["start"] : first["end"]] == first["answer"]
    assert second["input"] == "mine" and "_input" not in second
    assert third["input"] == "mine" and third["_input"] == {"end": 3}
    assert captured.err == (
        "NOTE: the input's 'answer', 'end', 'score', which the answers write too, kept under "
        '"input" or "_input" (2 lines)\n'
    )


def test_offsets_point_at_the_answer_in_any_script(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pieces = ["Paris", "capital", "Café", "e\u0301te\u0301", "東京は日本の首都です。", "👍🏽",
              "👨\u200d👩\u200d👧", "שלום", "عالم", "\u200b", "\u00a0", "\t", "\n", "\r\n", "ﬁ",
              "İstanbul", "ß", "\ufeff", "\u3000", "“quoted”", "U.S.", "🇫🇷", "1999."]  # fmt: skip
    rng = np.random.default_rng(0)
    items = []
    for n in range(40):
        words = rng.choice(pieces, size=int(rng.integers(1, 30)))
        context = "".join(w + str(rng.choice([" ", "", "\u00a0", "\n"])) for w in words)
        items.append({"id": n, "context": "x " + context, "question": "What is the capital?"})
    assert main(predict(run, "--input", str(jsonl(tmp_path / "in.jsonl", *items)))) == 0
    for item, line in zip(items, capsys.readouterr().out.splitlines(), strict=True):
        answer = json.loads(line)
        assert item["context"][answer["start"] : answer["end"]] == answer["answer"]
        assert answer["answer"] and answer["answer"] == answer["answer"].strip()


def test_a_printed_answer_is_one_line_whatever_breaks_it_spans(
    run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from treeqa.recipes import qa

    capsys.readouterr()
    # An answer across a tab and line breaks, as the tiny model's short spans cannot promise.
    context = "Le\tfleuve\r\nqui\n\npasse\u2028\u2029à Paris\x85est\x0bla\x0c\x1cSeine."
    answer = {"answer": context[:-1], "start": 0, "end": len(context) - 1, "score": 0.5}
    monkeypatch.setattr(qa, "predict", lambda loaded, pairs, **_: [dict(answer) for _ in pairs])
    argv = predict(run, "--context", context, "--question", "Quel fleuve ?")
    assert main(argv) == 0
    assert capsys.readouterr().out == (  # was: the answer and its tab cut across lines
        f"Le fleuve qui passe à Paris est la Seine\t(score 0.5000, characters 0-{len(context) - 1})\n"
    )
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == context[:-1]


def test_no_answer_printed_with_its_margin_and_best_span_not_offsets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A threshold far below zero: this SQuAD 2.0 model answers nothing, whatever it learned.
    run = train_tiny(tmp_path, "v2.0", "--threshold=-1e6")
    context, question, _ = CONTEXTS[0]
    capsys.readouterr()
    assert main(predict(run, "--context", context, "--question", question, "--json")) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["start"] == -1 and result["best_span"]
    assert main(predict(run, "--context", context, "--question", question)) == 0
    assert capsys.readouterr().out == (
        f"(no answer)\t(score {result['score']:.4f}, no-answer margin "
        f"{result['no_answer_margin']:.4f}; best span {json.dumps(result['best_span'])})\n"
    )


def test_a_reader_that_stops_early_stops_the_answers_quietly(run: Path, tmp_path: Path) -> None:
    # `treeqa predict qa --input big.jsonl | head -1`: more answers than a pipe holds (64 KiB).
    context, question, _ = CONTEXTS[0]
    items = (
        {"id": n, "note": "x" * 500, "context": context, "question": question} for n in range(200)
    )
    src = jsonl(tmp_path / "in.jsonl", *items)
    argv = [sys.executable, "-m", "treeqa", *predict(run, "--input", str(src))]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stderr is not None
        assert json.loads(child.stdout.readline())["id"] == 0
        child.stdout.close()
        assert child.stderr.read() == b""  # was: treeqa predict qa: error: [Errno 32] Broken pipe
        assert child.wait() == 128 + signal.SIGPIPE


def test_an_output_that_is_the_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Answers are written as they come: an error half-way would leave the input cut short.
    src = jsonl(tmp_path / "in.jsonl", {"context": CONTEXTS[0][0], "question": "Where?"})
    before = src.read_text()
    (tmp_path / "sub").mkdir()
    again = tmp_path / "sub" / ".." / "in.jsonl"
    argv = ["predict", "qa", "--checkpoint", str(tmp_path / "none"), "--input", str(src)]
    assert main([*argv, "--output", str(again)]) == 2
    assert capsys.readouterr().err == (
        f"treeqa predict qa: error: --output {again} is the --input file; write the results"
        " elsewhere\n"
    )
    assert src.read_text() == before


def test_a_field_given_twice_on_a_line_is_refused_naming_it(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"context": "Paris is big.", "question": "What?", "context": "Dup key"}\n')
    assert main(predict(run, "--input", str(src))) == 2
    assert f"{src}:1: field 'context' is given twice" in capsys.readouterr().err


def test_a_line_nested_too_deeply_or_with_a_huge_integer_is_named_not_a_traceback(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = '{"context": "Paris is big.", "question": "What?"'
    src = tmp_path / "in.jsonl"
    src.write_text(f'{good}}}\n{good}, "x": {"[" * 100_000}{"]" * 100_000}}}\n')
    assert main(predict(run, "--input", str(src))) == 2
    assert f"{src}:2: JSON nested too deeply" in capsys.readouterr().err
    src.write_text(f'{good}, "n": {"9" * 5000}}}\n')
    assert main(predict(run, "--input", str(src))) == 2
    assert f"{src}:1: invalid JSON:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("NaN", "NaN is not a JSON number"),
        ("[-Infinity]", "-Infinity is not a JSON number"),
        ("1e999", "the number 1e999 is out of range for a float"),
    ],
)
def test_a_line_with_nan_or_infinity_is_refused_not_echoed_as_invalid_json(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    # Python's json read these and the answer line echoed them back: "id": NaN, no JSON.
    src = tmp_path / "in.jsonl"
    src.write_text(f'{{"context": "Paris is big.", "question": "What?", "id": {value}}}\n')
    assert main(predict(run, "--input", str(src))) == 2
    assert f"{src}:1: invalid JSON: {message}" in capsys.readouterr().err
