"""``treeqa serve``: trained models behind a small JSON API and a web page.

Routes (JSON in and out; errors are ``{"error": message}`` with a 4xx status that says whose
fault it was):

    GET  /                 the web page (``static/index.html``); HEAD works wherever GET does
    GET  /api/health       {"status": "ok", "models": {task: {..., "checkpoint": as given,
                           "file": the checkpoint file read, best or else last}}}
    POST /api/sentiment    {"tree": "(3 (2 a) (3 (2 good) (2 film)))"}  (or "((a) ((good) (film)))")
                           -> {"text", "label", "probabilities", "nodes": [{"words", "label",
                               "parent"}]}, nodes in pre-order
                           {"text": "Not a good film. Fine acting."}  (a model trained on
                           dependency trees: the text is parsed as its data was)
                           -> {"sentences": [one result as above per sentence, its nodes also
                               with "word", "position", "tag", "rel"]}
    POST /api/qa           {"context": ..., "question": ...}
                           -> {"answer", "start", "end", "score"}  (character offsets)

One checkpoint per task; the models answer one request at a time (a lock), which keeps their
memory flat whatever the number of clients. Text for a dependency model is parsed by spaCy under
a lock of its own, so a long text holds up other texts only, not the models. The standard
library's threading HTTP server is enough for this: the work is in the model, not in the
connections.

A body comes with Content-Length or ``Transfer-Encoding: chunked``. Connections are kept alive
(HTTP/1.1) unless a request leaves unread bytes behind, which would be taken for the next one.
"""

from __future__ import annotations

import functools
import json
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from io import BufferedIOBase
from pathlib import Path
from typing import Any, cast

from treeqa.data.squad import unique_keys
from treeqa.train import checkpoint as ckpt

MAX_BODY = 1 << 20
"""Largest request body accepted (bytes): a SQuAD context is a few kB."""
REQUEST_TIMEOUT = 30.0
"""Seconds a client may stay silent while sending its request; then its connection ends."""
LINGER_S, LINGER_BYTES = 2.0, 64 << 20
"""After refusing a body it left unread, the server reads and drops what the client still
sends, for this long and up to this much, before it closes: closing a socket with unread data
resets the connection, and a client still sending would see the reset, not the answer."""
MAX_LINE = 4096
"""Longest chunk-size line or trailer field accepted in a chunked body (bytes, CRLF included)."""
HEX = re.compile(rb"[0-9A-Fa-f]+")
"""A chunk size: hex digits only (``int(s, 16)`` also takes "0x", "_", signs and blanks)."""
PAGES = ("/", "/index.html")
"""Paths of the web page."""
MAX_TEXT_CHARS = 10_000
"""The longest text (characters) a dependency model's parser takes, checked before parsing:
spaCy's time grows with the text, ~2.6 s for 10,000 characters of short sentences and ~5 s
for one 10,000-token sentence (refused after parsing: over 5,000 nodes) on one CPU thread;
a long review is a few thousand characters."""
MAX_REPLY_WORDS = 16_000_000
"""The most bytes of words a sentiment reply lists: each node lists its subtree's words, so a
reply grows with a tree's depth times its length (a 5,000-node chain of one-letter words lists
6.3 MB; 2,500 levels of 150-letter words, 470 MB from a 390 kB request, are refused)."""
STOP_WAIT_S = 30.0
"""Seconds a stopping server waits for the requests in progress (REQUEST_TIMEOUT: a client
that goes silent while sending is dropped by then anyway)."""
JSON_BLANKS = " \t\r\n"
"""The whitespace JSON allows around a value."""


class RequestError(Exception):
    """A bad request: ``status``, a message naming the field at fault and any extra headers."""

    def __init__(self, status: HTTPStatus, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def crlf_line(stream: BufferedIOBase, max_line: int, what: str) -> bytes:
    """One line of chunked framing, CRLF included; a bare LF, a line of ``max_line`` bytes with
    no end, or the end of the stream is a 400."""
    line = stream.readline(max_line)
    if line.endswith(b"\r\n"):
        return line
    if line.endswith(b"\n"):
        message = f"body: {what} ends in a bare LF, not CRLF"
    elif len(line) == max_line:
        message = f"body: {what} longer than {max_line} B"
    else:
        message = "body: the connection closed before the last chunk"
    raise RequestError(HTTPStatus.BAD_REQUEST, message)


def read_chunked(stream: BufferedIOBase, limit: int, max_line: int = MAX_LINE) -> bytes:
    """The data of a chunked body (RFC 9112 §7.1), read from ``stream`` through its final CRLF
    and no further, so the next request on the connection starts where this one stops.

    ``stream`` is the connection's buffered reader: ``chunk-size [;ext] CRLF data CRLF``, ...,
    ``0 [;ext] CRLF``, trailer fields each ending in CRLF, then CRLF. Returns the chunks' data
    joined, at most ``limit`` bytes; extensions and trailers are read and dropped. Raises
    RequestError: 413 as soon as a chunk size would take the data past ``limit`` (that chunk
    is left unread), or the size lines (extensions included) and trailers past ``limit`` bytes
    of their own; 400 for a size that is not hex digits, a line over ``max_line`` bytes or not
    ending in CRLF, data not followed by CRLF, or a stream that ends early. A client that goes
    silent raises the socket's TimeoutError.
    """
    chunks: list[bytes] = []
    total = framing = 0
    trailers = False  # past the last chunk: trailer fields up to an empty line
    while True:
        line = crlf_line(stream, max_line, "trailer field" if trailers else "chunk size line")
        framing += len(line)
        if framing > limit:  # else 1-byte chunks with 4 kB extensions read 4000x the limit
            message = f"body: chunk size lines and trailers over {limit} B"
            raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, message)
        if trailers:
            if line == b"\r\n":
                return b"".join(chunks)
            continue
        digits = line[:-2].split(b";", 1)[0].rstrip(b" \t")  # blanks may precede ";" (BWS)
        if not HEX.fullmatch(digits):
            message = f"body: chunk size {digits[:20].decode('latin-1')!r} is not hexadecimal"
            raise RequestError(HTTPStatus.BAD_REQUEST, message)
        size = int(digits, 16)
        if size == 0:
            trailers = True
            continue
        total += size
        if total > limit:
            raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {limit} B")
        chunks.append(stream.read(size))
        end = stream.read(2)
        if len(chunks[-1]) < size or len(end) < 2:
            raise RequestError(HTTPStatus.BAD_REQUEST, "body: the connection closed mid-chunk")
        if end != b"\r\n":
            message = f"body: the data of a {size}-byte chunk is not followed by CRLF"
            raise RequestError(HTTPStatus.BAD_REQUEST, message)


def drain(connection: socket.socket) -> None:
    """End our side of ``connection``, then read and drop what the client still sends until it
    closes, ``LINGER_S`` pass or ``LINGER_BYTES`` arrive (a "lingering close")."""
    try:
        connection.shutdown(socket.SHUT_WR)
        deadline, left = time.monotonic() + LINGER_S, LINGER_BYTES
        while left > 0 and (wait := deadline - time.monotonic()) > 0:
            connection.settimeout(wait)
            chunk = connection.recv(min(left, 1 << 16))
            if not chunk:
                return
            left -= len(chunk)
    except OSError:  # the client is gone, or went silent: nothing more to wait for
        return


def field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise RequestError(HTTPStatus.BAD_REQUEST, f"field {name!r}: expected a non-empty string")
    return value


def strings(value: Any) -> Iterator[str]:
    """Every string in decoded JSON, keys included; a loop, not recursion, as json.loads
    accepts nesting almost as deep as the recursion limit."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item


def check_text(body: dict[str, Any]) -> None:
    """JSON's ``\\ud800`` escape decodes to a lone surrogate, which no UTF-8 reply can carry:
    refuse it here, naming the field, rather than fail while answering."""
    for name, value in body.items():
        for text in strings([name, value]):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise RequestError(
                    HTTPStatus.BAD_REQUEST, f"field {name!r}: not valid text (a lone surrogate)"
                ) from err


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
            task = ckpt.read_meta(path).get("task")  # the header only: no tensor read twice
            if task in self.info:
                raise ValueError(f"{path}: a second {task} checkpoint; serve one per task")
            if task == "sentiment":
                from treeqa.recipes import sentiment

                self.sentiment = sentiment.load_model(path, device)
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
                self.qa = qa.load_model(path, device)
                self.info[task] = {"model": "qanet", "squad": self.qa.meta["squad_version"]}
            else:
                raise ValueError(f"{path}: a checkpoint of task {task!r}, expected sentiment or qa")
            self.info[task]["checkpoint"] = str(path)
            self.info[task]["file"] = str(ckpt.resolve(path).absolute())  # best, else last
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
        if len(pair[0]) > MAX_BODY // 4:
            raise RequestError(HTTPStatus.BAD_REQUEST, "field 'context': longer than 256k chars")
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


@functools.cache
def page() -> bytes:
    return resources.files("treeqa.serve").joinpath("static/index.html").read_bytes()


def handler_for(models: Models) -> type[BaseHTTPRequestHandler]:
    routes: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {
        ("GET", "/api/health"): models.health,
        ("POST", "/api/sentiment"): models.predict_sentiment,
        ("POST", "/api/qa"): models.predict_qa,
    }

    def example(path: str) -> str:
        """A body the POST route ``path`` takes, for the message that refuses an empty one."""
        if path == "/api/qa":
            return '{"context": "The Seine flows through Paris.", "question": "What flows?"}'
        if models.info.get("sentiment", {}).get("input") == "text":
            return '{"text": "Not a good film."}'
        return '{"tree": "((the) (film))"}'

    def allowed(path: str) -> list[str]:
        methods = [m for m, p in routes if p == path]
        if path in PAGES:
            methods.append("GET")
        if "GET" in methods:
            methods.append("HEAD")
        return methods

    class Handler(BaseHTTPRequestHandler):
        server_version = "treeqa"
        protocol_version = "HTTP/1.1"  # keep-alive; every reply has a Content-Length
        timeout = REQUEST_TIMEOUT
        body_read = False  # reset per request: whether its body has been read to the end
        answered = False  # reset per request: whether its answer has begun
        refused_unread = False  # the answer leaves the request's body unread

        def handle_one_request(self) -> None:
            self.counted = False
            try:
                super().handle_one_request()
            finally:
                if self.counted:
                    cast(Server, self.server).done()

        def parse_request(self) -> bool:
            # A request is in progress from its first line read to its answer sent: a
            # stopping server waits for it (its bytes would reset the connection unread).
            cast(Server, self.server).begin()
            self.counted = True
            self.body_read = self.answered = False
            return super().parse_request()

        def do_GET(self) -> None:
            if self.path.split("?")[0] in PAGES:
                self.send(HTTPStatus.OK, page(), "text/html; charset=utf-8")
            else:
                self.answer("GET")

        def do_HEAD(self) -> None:
            self.do_GET()  # send() leaves the body out

        def do_POST(self) -> None:
            self.answer("POST")

        # Methods no route takes: a 405 naming the allowed ones, not stdlib's HTML 501.
        def do_PUT(self) -> None:
            self.answer("PUT")

        def do_DELETE(self) -> None:
            self.answer("DELETE")

        def do_PATCH(self) -> None:
            self.answer("PATCH")

        def do_OPTIONS(self) -> None:
            self.answer("OPTIONS")

        def answer(self, method: str) -> None:
            path = self.path.split("?")[0]
            try:
                route = routes.get((method, path))
                if route is None:
                    raise self.no_route(path)
                result = route(self.body(path) if method == "POST" else {})
                self.send_json(HTTPStatus.OK, result)
            except RequestError as err:
                self.send_json(err.status, {"error": str(err)}, err.headers)
            except ConnectionError:  # the client is gone: no one to answer (handle_error)
                raise
            except Exception as err:  # noqa: BLE001 - a server answers, whatever went wrong
                if not self.answered:  # else a second status line would follow the first
                    self.send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": repr(err)})
                raise

        def no_route(self, path: str) -> RequestError:
            if methods := allowed(path):
                allow = {"Allow": ", ".join(methods)}
                message = f"{self.command} {self.path}: this route takes {' or '.join(methods)}"
                return RequestError(HTTPStatus.METHOD_NOT_ALLOWED, message, allow)
            return RequestError(HTTPStatus.NOT_FOUND, f"{self.command} {self.path}: no such route")

        def content_length(self) -> int:
            given = self.headers.get_all("Content-Length") or []
            if not given:  # no length: the body would be read as empty
                raise RequestError(HTTPStatus.LENGTH_REQUIRED, "header Content-Length: missing")
            if len(set(given)) > 1:  # which one frames the body is anyone's guess
                raise RequestError(
                    HTTPStatus.BAD_REQUEST, f"header Content-Length: differing values {given}"
                )
            if not given[0].strip().isdecimal():  # read(-1) would wait for the client to hang up
                raise RequestError(
                    HTTPStatus.BAD_REQUEST,
                    f"header Content-Length: {given[0]!r} is not a byte count",
                )
            return int(given[0])

        def sized_body(self) -> bytes:
            length = self.content_length()
            if length > MAX_BODY:
                raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} B")
            try:
                data = self.rfile.read(length)
            except TimeoutError as err:
                raise RequestError(
                    HTTPStatus.REQUEST_TIMEOUT,
                    f"body: fewer than the {length} bytes of Content-Length arrived",
                ) from err
            if len(data) < length:  # the client ended its side: a body cut short, not a whole one
                raise RequestError(
                    HTTPStatus.BAD_REQUEST,
                    f"body: fewer than the {length} bytes of Content-Length arrived "
                    f"({len(data)}, then the connection closed)",
                )
            return data

        def chunked_body(self) -> bytes:
            """A body with Transfer-Encoding, whose codings must be exactly ``chunked`` (RFC 9112
            §6.1, §6.3); it frames the body even where Content-Length is given too."""
            if "Content-Length" in self.headers:  # both: a request-smuggling attempt, perhaps
                self.close_connection = True
            given = ", ".join(self.headers.get_all("Transfer-Encoding") or [])
            codings = [c.strip().lower() for c in given.split(",") if c.strip()]
            if self.request_version < "HTTP/1.1":  # no HTTP/1.0 sender can frame it
                message = "header Transfer-Encoding: not allowed in an HTTP/1.0 request"
                raise RequestError(HTTPStatus.BAD_REQUEST, message)
            if codings[-1:] != ["chunked"]:  # the end of the body cannot be found
                message = f"header Transfer-Encoding: {given!r} does not end in chunked"
                raise RequestError(HTTPStatus.BAD_REQUEST, message)
            if len(codings) > 1:
                message = f"header Transfer-Encoding: {given!r}: only chunked is supported"
                raise RequestError(HTTPStatus.NOT_IMPLEMENTED, message)
            try:
                return read_chunked(self.rfile, MAX_BODY)
            except TimeoutError as err:
                raise RequestError(
                    HTTPStatus.REQUEST_TIMEOUT, "body: the client went silent before the last chunk"
                ) from err

        def body(self, path: str) -> dict[str, Any]:
            chunked = "Transfer-Encoding" in self.headers
            raw = self.chunked_body() if chunked else self.sized_body()
            self.body_read = True
            try:
                text = raw.decode("utf-8-sig")  # a leading BOM dropped, as the CLI's readers do
                if not text.strip(JSON_BLANKS):  # else "invalid JSON at line 1 column 1"
                    message = f"body: empty; expected a JSON object such as {example(path)}"
                    raise RequestError(HTTPStatus.BAD_REQUEST, message)
                body = json.loads(text, object_pairs_hook=unique_keys)
            except KeyError as err:  # unique_keys: the last value would win, silently
                key = err.args[0]
                shown = repr(key if len(key) <= 40 else key[:40] + "...")  # surrogates escaped
                message = f"body: the key {shown} appears twice in one object"
                raise RequestError(HTTPStatus.BAD_REQUEST, message) from err
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
            check_text(body)
            return body

        def send_error(
            self, code: int, message: str | None = None, explain: str | None = None
        ) -> None:
            """The standard library's own refusals (URL too long, too many headers, a method
            with no ``do_`` method), as JSON like every other error."""
            status = HTTPStatus(code)
            self.close_connection = True  # the request may be half read
            text = ": ".join(s for s in (message or status.phrase, explain) if s)
            self.send_json(status, {"error": text})

        def send_json(
            self, status: HTTPStatus, value: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(value, ensure_ascii=False).encode("utf-8")
            self.send(status, data, "application/json; charset=utf-8", headers)

        def unread_body(self) -> bool:
            """Whether the request has a body still unread (a refusal, or a route that takes
            none): what follows on the connection is no request, so the connection must end."""
            length = self.headers.get("Content-Length", "0").strip()
            return not self.body_read and ("Transfer-Encoding" in self.headers or length != "0")

        def send(
            self, status: HTTPStatus, data: bytes, kind: str, headers: dict[str, str] | None = None
        ) -> None:
            self.answered = True
            self.send_response(status)
            # Where the request line or headers were refused, close_connection is set already
            # and self.headers may be missing.
            self.refused_unread = hasattr(self, "headers") and self.unread_body()
            stopping = cast(Server, self.server).stopping  # this answer is the connection's last
            self.close_connection = self.close_connection or self.refused_unread or stopping
            headers = {"Content-Type": kind, **(headers or {})}
            if self.close_connection:
                headers["Connection"] = "close"
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def finish(self) -> None:
            lingering = self.close_connection and self.refused_unread
            super().finish()  # the answer is flushed
            if lingering:
                drain(self.connection)

        def log_error(self, format: str, *args: Any) -> None:
            if format.startswith("Request timed out"):  # a kept-alive connection left idle
                return
            super().log_error(format, *args)

        def log_message(self, format: str, *args: Any) -> None:
            if isinstance(self.server, Server) and self.server.quiet:
                return
            super().log_message(format, *args)

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a client that hangs does not keep the process alive
    quiet = False  # no line per request
    # The listen backlog (stdlib: 5): connections beyond it wait ~1 s for a SYN retry, so a
    # burst of clients stalls while the one thread that accepts them is busy.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        super().__init__(address, handler)
        self.in_progress = 0  # requests being read or answered (not idle kept-alive connections)
        self.idle = threading.Condition()
        self.stopping = False

    def begin(self) -> None:
        with self.idle:
            self.in_progress += 1

    def done(self) -> None:
        with self.idle:
            self.in_progress -= 1
            self.idle.notify_all()

    def serve_until_stopped(self, say: Callable[[str], None]) -> None:
        """Serve until Ctrl-C or SIGTERM (a service manager's stop); then accept no more
        connections and let the requests in progress finish (``STOP_WAIT_S`` at most; Ctrl-C
        again stops at once)."""

        def stop(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            self.serve_forever()
        except KeyboardInterrupt:
            self.stopping = True
            self.socket.close()  # new clients are refused from here on
            if self.in_progress:
                say(
                    f"treeqa serve: stopping once the {self.in_progress} request(s) in "
                    f"progress are answered (at most {STOP_WAIT_S:.0f} s; Ctrl-C again stops now)"
                )
            deadline = time.monotonic() + STOP_WAIT_S
            with self.idle:
                # Short waits: a second signal is handled between them; and a last one with
                # none in progress, for a request a kept-alive client sent just now.
                quiet = 0
                while quiet < 2 and time.monotonic() < deadline:
                    quiet = 0 if self.in_progress else quiet + 1
                    self.idle.wait(0.1)
            say("treeqa serve: stopped")
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (reset, broken pipe) is no server error, and a kept-alive
        # connection is often reset while idle: a browser or a client that left a reply unread.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def make_server(
    models: Models, host: str = "127.0.0.1", port: int = 8000, quiet: bool = False
) -> Server:
    """A server bound to ``host:port`` (port 0: any free one); call ``serve_forever()``."""
    server = Server((host, port), handler_for(models))
    server.quiet = quiet
    return server
