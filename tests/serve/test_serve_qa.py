"""``treeqa serve`` with a QANet checkpoint: answers with character offsets into the context."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("spacy")

sys.path.insert(0, str(Path(__file__).parents[1] / "recipes"))
from test_qa_recipe import TINY, prepared  # noqa: E402, F401 - the prepared-SQuAD fixture
from test_serve import call, serving  # noqa: E402

from treeqa.cli.main import main  # noqa: E402
from treeqa.data.squad import Tokenizer  # noqa: E402
from treeqa.recipes import qa  # noqa: E402
from treeqa.serve.models import MAX_CONTEXT_CHARS, Models  # noqa: E402

CONTEXT = "The Seine flows through Paris. Paris is the capital of France."


@pytest.fixture(scope="module")
def run_dir(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("serve_qa") / "qanet"
    assert main(["train", "qa", f"--prepared={prepared}", f"--out={out}", *TINY]) == 0
    return out


@pytest.fixture(scope="module")
def base(run_dir: Path) -> Iterator[str]:
    with serving(run_dir) as url:
        yield url


def test_qa_answers_as_predict_does_with_offsets_into_the_context(base: str, run_dir: Path) -> None:
    question = "What flows through Paris?"
    status, body = call(base, "/api/qa", {"context": CONTEXT, "question": question})
    assert status == 200
    assert body == qa.predict(qa.load_model(run_dir), [(CONTEXT, question)])[0]
    assert body["answer"] == CONTEXT[body["start"] : body["end"]] != ""
    status, health = call(base, "/api/health")
    assert health["models"]["qa"]["squad"] == "v1.1"


def test_a_context_without_words_is_refused(base: str) -> None:
    status, body = call(base, "/api/qa", {"context": "  \n ", "question": "Why?"})
    assert status == 400 and "field 'context'" in body["error"]
    status, body = call(base, "/api/sentiment", {"tree": "((a) (b))"})
    assert status == 404 and "no sentiment model" in body["error"]


def test_a_context_or_question_with_nothing_visible_is_a_422_naming_it(base: str) -> None:
    nothing = "\u200b\u200c\ufeff \u2060"  # tokens, but nothing to read: once answered
    for field, pair in (("context", (nothing, "Why?")), ("question", (CONTEXT, nothing))):
        status, body = call(base, "/api/qa", {"context": pair[0], "question": pair[1]})
        assert status == 422
        assert body["error"].startswith(f"field {field!r}: a {field} with no visible character")


def test_a_context_or_question_too_long_to_read_at_once_is_refused_before_the_model_runs(
    base: str,
) -> None:
    long_context = "word " * (qa.MAX_CONTEXT_TOKENS + 1)
    start = time.perf_counter()
    status, body = call(base, "/api/qa", {"context": long_context, "question": "Why?"})
    assert status == 422
    assert body["error"].startswith(f"field 'context': a context of {qa.MAX_CONTEXT_TOKENS + 1} ")
    assert time.perf_counter() - start < 5
    # A question too: a 1 MiB body of one (~200,000 tokens) would need a [J, J] attention of
    # 160 GB per head.
    long_question = "why " * (qa.MAX_QUESTION_TOKENS + 1)
    status, body = call(base, "/api/qa", {"context": "Paris is big.", "question": long_question})
    n = qa.MAX_QUESTION_TOKENS + 1
    assert status == 422
    assert body["error"].startswith(f"field 'question': a question of {n} tokens; this reads")


def test_a_lone_surrogate_is_a_400_naming_the_field(base: str) -> None:
    # JSON's \ud800 escape: once a 422 carrying the codec's message.
    raw = b'{"context": "Paris\\ud800 is big.", "question": "What?"}'
    status, body = call(base, "/api/qa", raw=raw)
    assert (status, body) == (400, {"error": "field 'context': not valid text (a lone surrogate)"})


def new_words(seed: int, n: int) -> str:
    return " ".join(f"w{seed}x{i}" for i in range(n)) + "."


def test_a_fresh_tokenizer_tokenises_as_a_used_one() -> None:
    used, fresh = Tokenizer(), Tokenizer()
    for seed in range(20):
        used.tokenize(new_words(seed, 30))
    texts = [CONTEXT, new_words(3, 10), "Don't stop: it's 3.5 km (U.S.) away!"]
    for got, expected in zip(used.pipe(texts), fresh.pipe(texts), strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


def test_the_tokenizer_is_renewed_before_its_vocabulary_grows_without_bound(run_dir: Path) -> None:
    # spaCy keeps every new token text (~400 B each): a server learnt all words ever sent.
    models = Models([run_dir])
    models.max_new_strings = 100
    first, start = models.tokenizer, models.tokenizer.strings
    for seed in range(12):  # ~33 new strings a request: renewed every fifth
        pair = {"context": new_words(seed, 30), "question": "Which word?"}
        assert models.predict_qa(pair) == qa.predict(models.qa, [tuple(pair.values())])[0]
        assert models.tokenizer.strings - start <= 100 + 40
    assert models.tokenizer is not first


def test_a_field_given_twice_is_a_400_naming_it(base: str) -> None:
    # The last "context" was read, silently; evaluate refuses a question id given twice.
    raw = b'{"context": "Paris is big.", "question": "What?", "context": "Dup key"}'
    status, body = call(base, "/api/qa", raw=raw)
    assert (status, body) == (400, {"error": "body: the key 'context' appears twice in one object"})


def test_a_context_too_long_to_tokenise_is_a_422_as_one_of_too_many_tokens(base: str) -> None:
    context = "x" * (MAX_CONTEXT_CHARS + 1)
    status, body = call(base, "/api/qa", {"context": context, "question": "Why?"})
    assert status == 422
    assert body["error"] == (
        f"field 'context': {MAX_CONTEXT_CHARS + 1:,} characters; this server reads at most "
        f"{MAX_CONTEXT_CHARS:,} at once"
    )
