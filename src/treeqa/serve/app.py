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
A request must arrive whole within ``REQUEST_TIMEOUT`` seconds of its first byte (else a 408 and
the connection ends), and an idle connection ends after as long. ``MAX_CONNECTIONS`` are held at
once, a thread each; one more is answered 503 before its request is read.
"""

from __future__ import annotations

import functools
import io
import json
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, cast

from treeqa.cli.common import finite
from treeqa.data.squad import finite_float, json_beyond_syntax, no_constant, unique_keys
from treeqa.serve.bodies import (
    MAX_BODY,
    REQUEST_TIMEOUT,
    Deadline,
    RequestError,
    check_text,
    drain,
    read_chunked,
)
from treeqa.serve.models import Models
from treeqa.serve.origin import Guard

PAGES = ("/", "/index.html")
"""Paths of the web page."""
MAX_CONNECTIONS = 256
"""Connections ``treeqa serve`` holds at once; the next is answered 503 (Retry-After: 1)."""
STOP_WAIT_S = 30.0
"""Seconds a stopping server waits for the requests in progress (REQUEST_TIMEOUT: a client
that goes silent while sending is dropped by then anyway)."""
ABSOLUTE_FORM = re.compile(r"https?://([^/?#]*)", re.IGNORECASE)
HTTP_VERSION = re.compile(r"HTTP/[0-9]\.[0-9]")  # RFC 9112 §2.3: one digit each side
"""A request target in absolute form, scheme and authority (the group) before the path."""
MAX_REQUEST_LINE = 65536
"""Longest request line (bytes), as stdlib's ``handle_one_request`` reads it; longer: a 414."""
JSON_BLANKS = " \t\r\n"
"""The whitespace JSON allows around a value."""


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
        default_request_version = "HTTP/1.0"  # stdlib's "HTTP/0.9" sends a refusal bare
        timeout = REQUEST_TIMEOUT
        body_read = False  # reset per request: whether its body has been read to the end
        answered = False  # reset per request: whether its answer has begun
        refused_unread = False  # the answer leaves the request's body unread
        raw_requestline: bytes  # read by stdlib's handle_one_request before parse_request

        def setup(self) -> None:
            super().setup()
            self.rfile = io.BufferedReader(Deadline(self.connection, self.timeout))

        def handle_one_request(self) -> None:
            self.counted = self.answered = False
            self.__dict__.pop("headers", None)  # the last request's, until this one's are read
            clock = cast(Deadline, cast(io.BufferedReader, self.rfile).raw)
            clock.next_request()
            try:
                super().handle_one_request()  # a timeout ends the connection, unanswered
                if clock.expired and not self.answered:
                    self.requestline = getattr(self, "requestline", "")
                    self.request_version, self.command = self.default_request_version, ""
                    message = f"the request did not arrive whole within {self.timeout:g} s"
                    self.send_error(HTTPStatus.REQUEST_TIMEOUT, message)
            finally:
                if self.counted:
                    cast(Server, self.server).done()

        def skip_blank_lines(self) -> None:
            """Empty lines before a request line are no request (RFC 9112 §2.2): a client may
            end a POST body with a stray CRLF, which stdlib took for an empty request line and
            answered by closing the connection, the client's next request on it unanswered.
            The first waits as an idle connection does; those after it, within the deadline of
            the request they precede."""
            clock = cast(Deadline, cast(io.BufferedReader, self.rfile).raw)
            first = True
            while self.raw_requestline in (b"\r\n", b"\n"):
                if first:
                    clock.next_request()
                    first = False
                self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)

        def parse_request(self) -> bool:
            self.skip_blank_lines()
            if not self.raw_requestline:  # the client closed after them
                self.close_connection = True
                return False
            # A request is in progress from its first line read to its answer sent: a
            # stopping server waits for it (its bytes would reset the connection unread).
            cast(Server, self.server).begin()
            self.counted = True
            self.body_read = self.answered = False
            if len(self.raw_requestline) > MAX_REQUEST_LINE:  # as stdlib's own check
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return False
            line = self.raw_requestline.decode("latin-1").rstrip("\r\n")
            words = line.split()
            # stdlib takes "GET /" for HTTP/0.9 (a bare answer), and reads "HTTP/1.01" as 1.1
            # where this handler's checks compare the text, as 1.0: neither is HTTP/1.x.
            if len(words) == 2 or (len(words) == 3 and not HTTP_VERSION.fullmatch(words[2])):
                self.command, self.requestline = "", line
                self.request_version = self.default_request_version
                message = f"request line {line[:80]!r}: expected a method, a path and HTTP/1.x"
                self.send_error(HTTPStatus.BAD_REQUEST, message)
                return False
            if not super().parse_request():
                return False
            # A header line that is no "Name: value" field ("X-é: a", a bare CR) ends what the
            # parser takes for fields: those after it (Content-Length, Connection) would be
            # lost, the request refused for a header it has, and its body read as a request.
            unread = self.headers.get_payload()
            if isinstance(unread, str) and unread.strip("\r\n"):
                line = unread.splitlines()[0]
                self.send_error(
                    HTTPStatus.BAD_REQUEST, f"header line {line[:80]!r}: not a 'Name: value' field"
                )
                return False
            return True

        def route_path(self) -> str:
            """The path the request is for: the target's path, its query dropped and its
            %-escapes decoded ("/api/%68ealth" is /api/health); an absolute-form target
            ("http://host/api/health", which a server must accept, RFC 9112 §3.2.2) read as
            its path."""
            target = self.path
            absolute = ABSOLUTE_FORM.match(target)
            if absolute:  # not urlsplit, which raises on "http://[::1/" (the request unanswered)
                target = target[absolute.end() :]
            return urllib.parse.unquote(target.split("?")[0]) or "/"

        def guard(self) -> None:
            """Refuse a request a page of another site made (``serve/origin.py``)."""
            hosts = self.headers.get_all("Host") or []
            if len(hosts) > 1:  # RFC 9112 §3.2: a 400
                raise RequestError(HTTPStatus.BAD_REQUEST, f"header Host: given twice {hosts}")
            if not hosts and self.request_version >= "HTTP/1.1":  # RFC 9112 §3.2: a 400 too
                message = "header Host: missing (an HTTP/1.1 request must name the server)"
                raise RequestError(HTTPStatus.BAD_REQUEST, message)
            guard = cast(Server, self.server).guard
            absolute = ABSOLUTE_FORM.match(self.path)
            if absolute:  # its authority names the server, Host is ignored (RFC 9112 §3.2.2)
                guard.check(self.headers.get("Origin"), absolute[1], "request target's host")
            else:
                guard.check(self.headers.get("Origin"), self.headers["Host"])

        def do_GET(self) -> None:
            if self.route_path() in PAGES:
                try:
                    self.guard()
                except RequestError as err:
                    self.send_json(err.status, {"error": str(err)})
                    return
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
            path = self.route_path()
            try:
                self.guard()
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
            # stdlib decodes the target as latin-1: "/é" as sent in UTF-8 read "/Ã©".
            shown = self.path.encode("latin-1").decode("utf-8", "replace")
            if methods := allowed(path):
                allow = {"Allow": ", ".join(methods)}
                message = f"{self.command} {shown}: this route takes {' or '.join(methods)}"
                return RequestError(HTTPStatus.METHOD_NOT_ALLOWED, message, allow)
            return RequestError(HTTPStatus.NOT_FOUND, f"{self.command} {shown}: no such route")

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
            digits = given[0].strip().lstrip("0") or "0"
            if len(digits) > len(str(MAX_BODY)):  # int() refuses over 4,300 digits: a 500
                raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} B")
            return int(digits)

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
                message = f"body: the last chunk did not arrive within {self.timeout:g} s"
                raise RequestError(HTTPStatus.REQUEST_TIMEOUT, message) from err

        def body(self, path: str) -> dict[str, Any]:
            chunked = "Transfer-Encoding" in self.headers
            raw = self.chunked_body() if chunked else self.sized_body()
            self.body_read = True
            try:
                text = raw.decode("utf-8-sig")  # a leading BOM dropped, as the CLI's readers do
                if not text.strip(JSON_BLANKS):  # else "invalid JSON at line 1 column 1"
                    message = f"body: empty; expected a JSON object such as {example(path)}"
                    raise RequestError(HTTPStatus.BAD_REQUEST, message)
                body = json.loads(  # strictly: Python alone reads NaN, Infinity and 1e999
                    text,
                    object_pairs_hook=unique_keys,
                    parse_constant=no_constant,
                    parse_float=finite_float,
                )
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
            except (RecursionError, ValueError) as err:  # 200,000 "[" in a row; NaN; a long int
                message = f"body: {json_beyond_syntax(err)}"
                raise RequestError(HTTPStatus.BAD_REQUEST, message) from err
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
            # A score that is not a finite number (a model whose weights went NaN) is null:
            # NaN is no JSON, and a browser's JSON.parse refuses the whole answer.
            data = json.dumps(finite(value), ensure_ascii=False, allow_nan=False).encode("utf-8")
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


class Stopped(KeyboardInterrupt):
    """A second stop signal: the server stopped without waiting for the requests in progress
    (the command exits 128 + ``signum``, as the shell expects)."""

    def __init__(self, signum: int):
        name = signal.Signals(signum).name
        super().__init__(f"{name} again: stopped without waiting for the requests in progress")
        self.signum = signum


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a client that hangs does not keep the process alive
    quiet = False  # no line per request
    # The listen backlog (stdlib: 5): connections beyond it wait ~1 s for a SYN retry, so a
    # burst of clients stalls while the one thread that accepts them is busy.
    request_queue_size = 128
    # Connections held at once (a thread each); one more is answered 503 and closed. The
    # models answer one request at a time: more would only wait, each holding a thread.
    max_connections = MAX_CONNECTIONS
    guard = Guard(frozenset())  # loopback names and addresses only, until make_server says

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        super().__init__(address, handler)
        self.in_progress = 0  # requests being read or answered (not idle kept-alive connections)
        self.idle = threading.Condition()
        self.stopping = False
        self.connections = 0  # open, each with its thread
        self.counting = threading.Lock()

    def finish_request(self, request: Any, client_address: Any) -> None:
        with self.counting:
            full = self.connections >= self.max_connections
            self.connections += not full
        if full:
            refuse_busy(request, self.max_connections)
            return
        try:
            super().finish_request(request, client_address)
        finally:
            with self.counting:
                self.connections -= 1

    def begin(self) -> None:
        with self.idle:
            self.in_progress += 1

    def done(self) -> None:
        with self.idle:
            self.in_progress -= 1
            self.idle.notify_all()

    def serve_until_stopped(self, say: Callable[[str], None]) -> None:
        """Serve until Ctrl-C or SIGTERM (a service manager's stop); then accept no more
        connections and let the requests in progress finish (``STOP_WAIT_S`` at most). A
        second stop signal, whenever it comes, stops at once: ``Stopped``. A signal ignored
        when serving began (a background job's SIGINT) stays ignored."""
        caught: list[int] = []  # stop signals, in the order they came

        def stop(signum: int, frame: Any) -> None:
            first = not caught  # before the append: a handler run between the two, one raises
            caught.append(signum)
            # Only the first raises: an exception landing between two lines of threading's
            # Condition.wait leaves its lock released twice (a RuntimeError, exit 1), and one
            # landing while the first unwinds serve_forever was taken for the first.
            if first:
                raise KeyboardInterrupt

        stops = [
            s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) != signal.SIG_IGN
        ]
        previous = {signum: signal.signal(signum, stop) for signum in stops}
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
                # Short waits: a second signal is seen between them; and a last one with
                # none in progress, for a request a kept-alive client sent just now.
                quiet = 0
                while quiet < 2 and time.monotonic() < deadline and len(caught) < 2:
                    quiet = 0 if self.in_progress else quiet + 1
                    self.idle.wait(0.1)
            if len(caught) < 2:
                say("treeqa serve: stopped")
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.server_close()
        if len(caught) > 1:
            raise Stopped(caught[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (reset, broken pipe) is no server error, and a kept-alive
        # connection is often reset while idle: a browser or a client that left a reply unread.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Server6(Server):
    """A server on an IPv6 address."""

    address_family = socket.AF_INET6


def refuse_busy(connection: socket.socket, most: int) -> None:
    """A 503 for a connection beyond the server's most, before its request is read; then a
    lingering close, so that the client reads the answer rather than a reset."""
    message = f"the server holds {most} connections, its most; try again shortly"
    data = json.dumps({"error": message}).encode("utf-8")
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    try:
        connection.settimeout(REQUEST_TIMEOUT)
        connection.sendall(head.encode("ascii") + data)
    except OSError:  # the client is gone already
        return
    drain(connection)


def make_server(
    models: Models,
    host: str = "127.0.0.1",
    port: int = 8000,
    quiet: bool = False,
    allow_hosts: Collection[str] = (),
) -> Server:
    """A server bound to ``host:port`` (port 0: any free one); call ``serve_forever()``. An
    IPv6 address (``::1``, ``::``) binds an IPv6 socket (stdlib's default, IPv4, refused it).
    ``allow_hosts``: names, beside loopback ones and IP addresses, that it answers in Host and
    Origin, and ``.domain``s whose names it answers in Host (``serve/origin.py``; ValueError
    for one that no request could match, or a domain of one label)."""
    server_class = Server6 if ":" in host else Server
    server = server_class((host, port), handler_for(models))
    server.quiet = quiet
    server.guard = Guard.for_address(str(server.server_address[0]), allow_hosts)
    return server
