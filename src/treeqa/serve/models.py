"""The models ``treeqa serve`` answers with: one loaded checkpoint per task, each API call's
answer, and the bounds on what one request may cost (a text's length, a reply's size)."""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from pathlib import Path
from typing import Any

from treeqa.serve.bodies import MAX_BODY, RequestError, field
from treeqa.train import checkpoint as ckpt

MAX_TEXT_CHARS = 10_000
"""The longest text (characters) a dependency model's parser takes, checked before parsing:
spaCy's time grows with the text, ~2.6 s for 10,000 characters of short sentences and ~5 s
for one 10,000-token sentence (refused after parsing: over 5,000 nodes) on one CPU thread;
a long review is a few thousand characters."""
MAX_CONTEXT_CHARS = MAX_BODY // 4
"""The longest QA context (characters) read at all, checked before tokenising: a context of more
tokens than the model reads is refused after tokenising, as a 422 too."""
MAX_REPLY_WORDS = 16_000_000
"""The most bytes of words a sentiment reply lists: each node lists its subtree's words, so a
reply grows with a tree's depth times its length (a 5,000-node chain of one-letter words lists
6.3 MB; 2,500 levels of 150-letter words, 470 MB from a 390 kB request, are refused)."""


def reply_words(tree: Any) -> int:
    """Bytes of the "words" of every node of ``tree`` in a reply, as ``send_json`` writes them
    (UTF-8; a control character as ``\\u0001``): each word (and its space) once for itself and
    once for each node above it."""
    depth = [0] * len(tree)  # nodes in pre-order: a parent comes before its children
    total = 0
    for i, (parent, word) in enumerate(zip(tree.parent.tolist(), tree.words, strict=True)):
        depth[i] = depth[parent] + 1 if parent >= 0 else 1
        if word is not None:
            total += (len(json.dumps(word, ensure_ascii=False).encode()) - 1) * depth[i]
    return total


class Models:
    """The loaded checkpoints, one per task, and the answer to each API call."""

    max_new_strings = 100_000
    """Token texts the QA tokenizer (or a dependency model's parser) may learn before it is
    replaced: spaCy keeps every new one (~400 B each, so ~40 MB), and a fresh tokenizer takes
    ~0.3 s to make (a parser ~1 s)."""

    def __init__(self, paths: list[Path], device: str = "cpu"):
        self.sentiment: Any = None
        self.qa: Any = None
        self.tokenizer: Any = None
        self.info: dict[str, dict[str, Any]] = {}
        for path in paths:
            # Best, else last, found once: the file reported is the one loaded, even where a
            # training writes its best checkpoint meanwhile.
            file = ckpt.resolve(path)
            task = ckpt.read_meta(file).get("task")  # the header only: no tensor read twice
            if task in self.info:
                raise ValueError(f"{path}: a second {task} checkpoint; serve one per task")
            if task == "sentiment":
                from treeqa.recipes import sentiment

                self.sentiment = sentiment.load_model(file, device)
                if self.sentiment.tags is not None and not self.sentiment.parser:
                    raise ValueError(
                        f"{path}: a model trained on dependency trees whose parser is not "
                        "recorded (its data folder had no meta.json): the server takes text or "
                        "bracketed trees, and it reads neither; predict from parsed trees with "
                        "`treeqa predict --input FILE.jsonl`"
                    )
                if self.sentiment.parser:  # needs spaCy and the pipeline: fail at start-up
                    self.parser_strings = self._parser_strings()
                meta = self.sentiment.meta
                self.info[task] = {
                    "model": meta["model"],
                    "task": self.sentiment.task,
                    "input": "text" if self.sentiment.parser else "tree",
                }
            elif task == "qa":
                from treeqa.data.squad import Tokenizer
                from treeqa.recipes import qa

                self.tokenizer = Tokenizer()  # needs spaCy: fail at start-up, not later
                self.tokenizer_strings = self.tokenizer.strings
                self.qa = qa.load_model(file, device)
                self.info[task] = {"model": "qanet", "squad": self.qa.meta["squad_version"]}
            else:
                no_task = ckpt.NO_TASK if task is None else ""
                raise ValueError(
                    f"{path}: a checkpoint of task {task!r}, expected sentiment or qa{no_task}"
                )
            self.info[task]["checkpoint"] = str(path)
            self.info[task]["file"] = str(file.absolute())
        self.lock = threading.Lock()  # the models: one request at a time
        self.parse_lock = threading.Lock()  # spaCy's pipeline, apart: see parse_text

    def health(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"status": "ok", "models": self.info}

    def renew_tokenizer(self) -> None:
        """A fresh tokenizer once the old one has learnt too many words: memory stays bounded
        and tokens are the same, spaCy's rules being fixed and its hashes those of the text."""
        if self.tokenizer.strings - self.tokenizer_strings > self.max_new_strings:
            from treeqa.data.squad import Tokenizer

            self.tokenizer = Tokenizer()
            self.tokenizer_strings = self.tokenizer.strings

    def _parser_strings(self) -> int:
        from treeqa.data.dependency import load_parser

        return len(load_parser(self.sentiment.parser).vocab.strings)

    def renew_parser(self) -> None:
        """As ``renew_tokenizer``, for a dependency model's parser: once it has learnt
        ``max_new_strings`` words, the pipeline is loaded again (~1 s) in place of it."""
        if self._parser_strings() - self.parser_strings > self.max_new_strings:
            from treeqa.data.dependency import load_parser

            load_parser.cache_clear()
            self.parser_strings = self._parser_strings()

    def parse_text(self, text: str) -> list[Any]:
        """A dependency model's text -> one tree per sentence, parsed by spaCy: refused first
        when over ``MAX_TEXT_CHARS``. The parse holds ``parse_lock``, not the models' lock: it
        touches neither model, while spaCy's pipeline is no thread-safe object (each parse
        adds the new words to its vocabulary), so parses still take turns."""
        if self.sentiment.parser and len(text) > MAX_TEXT_CHARS:  # else no parser: parse says
            raise RequestError(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                f"field 'text': a text of {len(text)} characters; this parses at most "
                f"{MAX_TEXT_CHARS} at once: give it a few paragraphs at a time",
            )
        with self.parse_lock:
            trees: list[Any] = self.sentiment.parse(text)
            self.renew_parser()
        return trees

    def predict_sentiment(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.sentiment is None:
            raise RequestError(HTTPStatus.NOT_FOUND, "no sentiment model is being served")
        from treeqa.data.tree import TreeSyntaxError, parse_tree
        from treeqa.recipes.sentiment import predict

        if "text" in body and "tree" in body:
            raise RequestError(HTTPStatus.BAD_REQUEST, "give 'tree' or 'text', not both")
        if "text" not in body and "tree" not in body:  # what this model reads is named
            wanted = (
                "field 'text' (raw text: this model was trained on dependency trees)"
                if self.sentiment.parser
                else "field 'tree' (a bracketed tree; 'text' is for a model trained on "
                "dependency trees)"
            )
            raise RequestError(HTTPStatus.BAD_REQUEST, f"give {wanted}: the body has neither")
        name = "text" if "text" in body else "tree"
        given = field(body, name)
        try:
            if name == "text":
                trees = self.parse_text(given)
            else:  # plain Python, no model: outside the lock too
                try:
                    trees = [parse_tree(given.strip(), "field 'tree'", 1)]
                except TreeSyntaxError as err:
                    raise RequestError(HTTPStatus.BAD_REQUEST, str(err)) from err
            listed = sum(reply_words(t) for t in trees)
            if listed > MAX_REPLY_WORDS:
                raise RequestError(
                    HTTPStatus.UNPROCESSABLE_ENTITY,
                    f"field {name!r}: the reply would list {listed:,} bytes of words (each "
                    f"node lists its subtree's words); at most {MAX_REPLY_WORDS:,}: a shallower "
                    "tree, or shorter words",
                )
            with self.lock:
                results: list[dict[str, Any]] = predict(self.sentiment, trees)
        except ValueError as err:  # e.g. a node with 3 children for the binary Tree-LSTM
            raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY, f"field {name!r}: {err}") from err
        if name == "text":
            return {"task": self.sentiment.task, "sentences": results}
        return {"task": self.sentiment.task, **results[0]}

    def predict_qa(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.qa is None:
            raise RequestError(HTTPStatus.NOT_FOUND, "no QA model is being served")
        from treeqa.recipes.qa import PairError, predict

        pair = (field(body, "context"), field(body, "question"))
        if len(pair[0]) > MAX_CONTEXT_CHARS:
            raise RequestError(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                f"field 'context': {len(pair[0]):,} characters; this server reads at most "
                f"{MAX_CONTEXT_CHARS:,} at once",
            )
        try:
            with self.lock:
                self.renew_tokenizer()
                answer: dict[str, Any] = predict(self.qa, [pair], tokenizer=self.tokenizer)[0]
        except PairError as err:  # a context or question too long, or with nothing visible
            raise RequestError(
                HTTPStatus.UNPROCESSABLE_ENTITY, f"field {err.field!r}: {err}"
            ) from err
        except ValueError as err:
            raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY, str(err)) from err
        return answer
