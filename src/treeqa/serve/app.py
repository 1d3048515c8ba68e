"""``treeqa serve``: trained models behind a small JSON API and a web page.

Routes (JSON in and out; errors are ``{"error": message}`` with a 4xx status that says whose
fault it was):

    GET  /                 the web page (``static/index.html``)
    GET  /api/health       {"status": "ok", "models": {task: {...}}}
    POST /api/sentiment    {"tree": "(3 (2 a) (3 (2 good) (2 film)))"}  (or "((a) ((good) (film)))")
                           -> {"text", "label", "probabilities", "nodes": [{"words", "label",
                               "parent"}]}, nodes in pre-order
                           {"text": "Not a good film. Fine acting."}  (a model trained on
                           dependency trees: the text is parsed as its data was)
                           -> {"sentences": [one result as above per sentence, its nodes also
                               with "word", "position", "tag", "rel"]}
    POST /api/qa           {"context": ..., "question": ...}
                           -> {"answer", "start", "end", "score"}  (character offsets)

One checkpoint per task; requests are answered one at a time (a lock), which keeps the models'
memory flat whatever the number of clients. The standard library's threading HTTP
server is enough for this: the work is in the model, not in the connections.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from treeqa.train import checkpoint as ckpt

MAX_BODY = 1 << 20
"""Largest request body accepted (bytes): a SQuAD context is a few kB."""
REQUEST_TIMEOUT = 30.0
"""Seconds a client may stay silent while sending its request; then its connection ends."""


class RequestError(Exception):
    """A bad request: ``status`` and a message naming the field at fault."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


def field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise RequestError(HTTPStatus.BAD_REQUEST, f"field {name!r}: expected a non-empty string")
    return value


class Models:
    """The loaded checkpoints, one per task, and the answer to each API call."""

    def __init__(self, paths: list[Path], device: str = "cpu"):
        self.sentiment: Any = None
        self.qa: Any = None
        self.tokenizer: Any = None
        self.info: dict[str, dict[str, Any]] = {}
        for path in paths:
            task = ckpt.read_meta(path).get("task")  # the header only: no tensor read twice
            if task in self.info:
                raise ValueError(f"{path}: a second {task} checkpoint; serve one per task")
            if task == "sentiment":
                from treeqa.recipes import sentiment

                self.sentiment = sentiment.load_model(path, device)
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
                self.qa = qa.load_model(path, device)
                self.info[task] = {"model": "qanet", "squad": self.qa.meta["squad_version"]}
            else:
                raise ValueError(f"{path}: a checkpoint of task {task!r}, expected sentiment or qa")
            self.info[task]["checkpoint"] = str(path)
        self.lock = threading.Lock()

    def health(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"status": "ok", "models": self.info}

    def predict_sentiment(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.sentiment is None:
            raise RequestError(HTTPStatus.NOT_FOUND, "no sentiment model is being served")
        from treeqa.data.tree import TreeSyntaxError, parse_tree
        from treeqa.recipes.sentiment import predict

        name = "text" if "text" in body and "tree" not in body else "tree"
        given = field(body, name)
        try:
            with self.lock:
                if name == "text":
                    sentences = predict(self.sentiment, self.sentiment.parse(given))
                    return {"task": self.sentiment.task, "sentences": sentences}
                try:
                    tree = parse_tree(given.strip(), "field 'tree'", 1)
                except TreeSyntaxError as err:
                    raise RequestError(HTTPStatus.BAD_REQUEST, str(err)) from err
                result: dict[str, Any] = predict(self.sentiment, [tree])[0]
        except ValueError as err:  # e.g. a node with 3 children for the binary Tree-LSTM
            raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY, f"field {name!r}: {err}") from err
        return {"task": self.sentiment.task, **result}

    def predict_qa(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.qa is None:
            raise RequestError(HTTPStatus.NOT_FOUND, "no QA model is being served")
        from treeqa.recipes.qa import predict

        pair = (field(body, "context"), field(body, "question"))
        if len(pair[0]) > MAX_BODY // 4:
            raise RequestError(HTTPStatus.BAD_REQUEST, "field 'context': longer than 256k chars")
        try:
            with self.lock:
                answer: dict[str, Any] = predict(self.qa, [pair], tokenizer=self.tokenizer)[0]
        except ValueError as err:  # e.g. a context of whitespace only
            raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY, f"field 'context': {err}") from err
        return answer


@functools.cache
def page() -> bytes:
    return resources.files("treeqa.serve").joinpath("static/index.html").read_bytes()


def handler_for(models: Models) -> type[BaseHTTPRequestHandler]:
    routes: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {
        ("GET", "/api/health"): models.health,
        ("POST", "/api/sentiment"): models.predict_sentiment,
        ("POST", "/api/qa"): models.predict_qa,
    }

    class Handler(BaseHTTPRequestHandler):
        server_version = "treeqa"
        timeout = REQUEST_TIMEOUT

        def do_GET(self) -> None:
            if self.path in ("/", "/index.html"):
                self.send(HTTPStatus.OK, page(), "text/html; charset=utf-8")
            else:
                self.answer("GET")

        def do_POST(self) -> None:
            self.answer("POST")

        def answer(self, method: str) -> None:
            path = self.path.split("?")[0]
            try:
                route = routes.get((method, path))
                if route is None:
                    allowed = [m for m, p in routes if p == path]
                    status = HTTPStatus.METHOD_NOT_ALLOWED if allowed else HTTPStatus.NOT_FOUND
                    raise RequestError(status, f"{method} {self.path}: no such route")
                result = route(self.body() if method == "POST" else {})
                self.send_json(HTTPStatus.OK, result)
            except RequestError as err:
                self.send_json(err.status, {"error": str(err)})
            except Exception as err:  # noqa: BLE001 - a server answers, whatever went wrong
                self.send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": repr(err)})
                raise

        def body(self) -> dict[str, Any]:
            given = self.headers.get("Content-Length") or "0"
            if not given.strip().isdecimal():  # read(-1) would wait for the client to hang up
                raise RequestError(
                    HTTPStatus.BAD_REQUEST, f"header Content-Length: {given!r} is not a byte count"
                )
            length = int(given)
            if length > MAX_BODY:
                raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} B")
            try:
                raw = self.rfile.read(length)
            except TimeoutError as err:
                raise RequestError(
                    HTTPStatus.REQUEST_TIMEOUT,
                    f"body: fewer than the {length} bytes of Content-Length arrived",
                ) from err
            try:
                body = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as err:
                raise RequestError(HTTPStatus.BAD_REQUEST, f"body: not UTF-8 ({err})") from err
            except json.JSONDecodeError as err:
                where = f"line {err.lineno} column {err.colno}"
                raise RequestError(
                    HTTPStatus.BAD_REQUEST, f"body: invalid JSON at {where}"
                ) from err
            except RecursionError as err:  # e.g. 200,000 "[" in a row
                raise RequestError(HTTPStatus.BAD_REQUEST, "body: JSON nested too deeply") from err
            if not isinstance(body, dict):
                raise RequestError(HTTPStatus.BAD_REQUEST, "body: expected a JSON object")
            return body

        def send_json(self, status: HTTPStatus, value: dict[str, Any]) -> None:
            data = json.dumps(value, ensure_ascii=False).encode("utf-8")
            self.send(status, data, "application/json; charset=utf-8")

        def send(self, status: HTTPStatus, data: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            if isinstance(self.server, Server) and self.server.quiet:
                return
            super().log_message(format, *args)

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a client that hangs does not keep the process alive
    quiet = False  # no line per request


def make_server(
    models: Models, host: str = "127.0.0.1", port: int = 8000, quiet: bool = False
) -> Server:
    """A server bound to ``host:port`` (port 0: any free one); call ``serve_forever()``."""
    server = Server((host, port), handler_for(models))
    server.quiet = quiet
    return server
