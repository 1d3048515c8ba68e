"""``treeqa serve`` with a QANet checkpoint: answers with character offsets into the context."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("spacy")

sys.path.insert(0, str(Path(__file__).parents[1] / "recipes"))
from test_qa_recipe import TINY, prepared  # noqa: E402, F401 - the prepared-SQuAD fixture
from test_serve import call  # noqa: E402

from treeqa.cli.main import main  # noqa: E402
from treeqa.recipes import qa  # noqa: E402
from treeqa.serve.app import Models, make_server  # noqa: E402

CONTEXT = "The Seine flows through Paris. Paris is the capital of France."


@pytest.fixture(scope="module")
def run_dir(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("serve_qa") / "qanet"
    assert main(["train", "qa", f"--prepared={prepared}", f"--out={out}", *TINY]) == 0
    return out


@pytest.fixture(scope="module")
def base(run_dir: Path) -> Iterator[str]:
    server = make_server(Models([run_dir]), port=0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


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


def test_a_context_too_long_to_read_at_once_is_refused_before_the_model_runs(base: str) -> None:
    long_context = "word " * (qa.MAX_CONTEXT_TOKENS + 1)
    start = time.perf_counter()
    status, body = call(base, "/api/qa", {"context": long_context, "question": "Why?"})
    assert status == 422 and f"a context of {qa.MAX_CONTEXT_TOKENS + 1} tokens" in body["error"]
    assert time.perf_counter() - start < 5
