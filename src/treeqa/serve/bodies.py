"""What ``treeqa serve`` reads from a client: a request body (Content-Length or chunked), the
fields of its JSON, and the lingering close after a body refused unread. A bad request is a
``RequestError`` naming what is at fault."""

from __future__ import annotations

import io
import re
import socket
import time
from collections.abc import Iterator
from http import HTTPStatus
from io import BufferedIOBase
from typing import Any

MAX_BODY = 1 << 20
"""Largest request body accepted (bytes): a SQuAD context is a few kB."""
REQUEST_TIMEOUT = 30.0
"""Seconds a request may take to arrive whole (request line, headers and body), from its first
byte, and seconds a kept-alive connection may stay idle before its next request."""
LINGER_S, LINGER_BYTES = 2.0, 64 << 20
"""After refusing a body it left unread, the server reads and drops what the client still
sends, for this long and up to this much, before it closes: closing a socket with unread data
resets the connection, and a client still sending would see the reset, not the answer."""
MAX_LINE = 4096
"""Longest chunk-size line or trailer field accepted in a chunked body (bytes, CRLF included)."""
HEX = re.compile(rb"[0-9A-Fa-f]+")
"""A chunk size: hex digits only (``int(s, 16)`` also takes "0x", "_", signs and blanks)."""


class RequestError(Exception):
    """A bad request: ``status``, a message naming the field at fault and any extra headers."""

    def __init__(self, status: HTTPStatus, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class Deadline(io.RawIOBase):
    """A connection's incoming bytes, each request to arrive whole within ``limit`` seconds of
    its first byte: a per-read timeout alone lets a client that sends a header byte every few
    seconds hold its connection for ever. Reads past the deadline raise TimeoutError, as a
    silent socket does, and set ``expired``; ``next_request()`` starts the clock afresh."""

    def __init__(self, connection: socket.socket, limit: float):
        self.connection, self.limit = connection, limit
        self.deadline: float | None = None  # None: waiting for the request's first byte
        self.expired = False

    def readable(self) -> bool:
        return True

    def next_request(self) -> None:
        self.deadline, self.expired = None, False

    def readinto(self, buffer: Any) -> int:
        left = self.limit if self.deadline is None else self.deadline - time.monotonic()
        if left <= 0:
            self.expired = True
            raise TimeoutError("the request did not arrive whole in time")
        self.connection.settimeout(left)
        try:
            count = self.connection.recv_into(buffer)
        except TimeoutError:
            self.expired = self.deadline is not None
            raise
        finally:
            self.connection.settimeout(self.limit)  # what writing the answer gets
        if count and self.deadline is None:
            self.deadline = time.monotonic() + self.limit
        return count


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
