"""``treeqa serve`` reading bodies sent with ``Transfer-Encoding: chunked`` (RFC 9112 §7.1).

Requests go out as raw bytes over a socket, so each test sends exactly the framing it names;
every malformed one is sent whole before the server answers, which then has nothing unread
(unread bytes at close would reset the connection and could lose the reply).
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_serve import TREE, call, run_dir, serving  # noqa: F401 - the trained-model fixture

from treeqa.serve.app import make_server
from treeqa.serve.bodies import MAX_BODY, MAX_LINE, RequestError, read_chunked
from treeqa.serve.models import Models

DATA = json.dumps({"tree": TREE}).encode()
Reply = tuple[int, dict[str, str], Any]


def chunks(data: bytes, size: int) -> bytes:
    """``data`` framed in chunks of ``size`` bytes, then the last chunk and no trailers."""
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


# Upper-case hex, extensions (blanks before ";", a quoted value), a last chunk of "000" with
# an extension, and two trailer fields.
DECORATED = (
    b"A ;name=value;flag\r\n"
    + DATA[:10]
    + b"\r\n"
    + b'%X;q="a;b"\r\n' % (len(DATA) - 10)
    + DATA[10:]
    + b"\r\n000;end\r\nX-Checksum: 1234\r\nX-Note: done\r\n\r\n"
)


def request(framed: bytes, *headers: str, version: str = "HTTP/1.1") -> bytes:
    """POST /api/sentiment with these header lines (chunked unless told) and body bytes."""
    lines = [f"POST /api/sentiment {version}", "Host: localhost", *headers]
    if not any(h.lower().startswith("transfer-encoding") for h in headers):
        lines.append("Transfer-Encoding: chunked")
    return "\r\n".join([*lines, "", ""]).encode() + framed


def replies(sock: socket.socket, count: int) -> list[Reply]:
    """The next ``count`` replies on a connection: status, headers (lower-case names), JSON."""
    reader = sock.makefile("rb")
    got = []
    for _ in range(count):
        status = int(reader.readline().split()[1])
        headers = {}
        while (line := reader.readline()) != b"\r\n":
            name, value = line.decode("latin-1").split(":", 1)
            headers[name.lower()] = value.strip()
        got.append((status, headers, json.loads(reader.read(int(headers["content-length"])))))
    return got


def closed(sock: socket.socket) -> bool:
    """Whether the server has ended the connection (it does so right after its reply)."""
    sock.settimeout(0.2)
    try:
        return sock.recv(1) == b""
    except TimeoutError:  # still open: the server waits for another request
        return False


def exchange(base: str, data: bytes, end: bool = False) -> tuple[Reply, bool]:
    """The reply to bytes sent on a fresh connection (``end``: then no more, an EOF), and
    whether the server closed the connection after it."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(data)
        if end:
            sock.shutdown(socket.SHUT_WR)
        (reply,) = replies(sock, 1)
        return reply, closed(sock)


@pytest.fixture(scope="module")
def base(run_dir: Path) -> Iterator[str]:  # noqa: F811
    with serving(run_dir) as url:
        yield url


@pytest.fixture(scope="module")
def expected(base: str) -> Any:
    """The answer to the same body sent with Content-Length."""
    status, answer = call(base, "/api/sentiment", {"tree": TREE})
    assert status == 200
    return answer


@pytest.mark.parametrize(
    "framed", [chunks(DATA, len(DATA)), chunks(DATA, 7), DECORATED], ids=["one", "7B", "ext"]
)
def test_a_chunked_body_gets_the_answer_of_a_sized_one(
    base: str, expected: Any, framed: bytes
) -> None:
    (status, headers, answer), _ = exchange(base, request(framed))
    assert (status, answer) == (200, expected) and "connection" not in headers


def test_http_client_sends_a_generator_body_chunked(base: str, expected: Any) -> None:
    connection = http.client.HTTPConnection(base.removeprefix("http://"), timeout=30)
    connection.request("POST", "/api/sentiment", body=iter([DATA[:10], DATA[10:]]))
    response = connection.getresponse()
    assert response.status == 200 and json.loads(response.read()) == expected
    connection.close()


def test_the_request_after_a_chunked_one_is_read_on_the_same_connection(
    base: str, expected: Any
) -> None:
    sized = b"POST /api/sentiment HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n%s" % (
        len(DATA),
        DATA,
    )
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        # Sent at once: the chunked body must be read through its final CRLF and no further.
        sock.sendall(request(DECORATED) + sized + request(chunks(DATA, 5)))
        got = replies(sock, 3)
        assert [(status, answer) for status, _, answer in got] == [(200, expected)] * 3
        sock.sendall(request(chunks(b"[]", 1)))  # still open after three replies
        ((status, headers, answer),) = replies(sock, 1)
        assert status == 400 and answer == {"error": "body: expected a JSON object"}
        assert "connection" not in headers and not closed(sock)


@pytest.mark.parametrize(
    "framed",
    [
        b"%x\r\n" % (MAX_BODY + 1),  # refused on its size line: the data need not be sent
        b"%x\r\n%s\r\n%x\r\n" % (MAX_BODY // 2, b" " * (MAX_BODY // 2), MAX_BODY // 2 + 1),
    ],
    ids=["one chunk", "two chunks"],
)
def test_a_body_over_the_limit_is_refused_before_its_last_chunk(base: str, framed: bytes) -> None:
    (status, headers, answer), was_closed = exchange(base, request(framed))
    assert status == 413 and answer == {"error": f"body over {MAX_BODY} B"}
    assert headers["connection"] == "close" and was_closed


@pytest.mark.parametrize(
    ("framed", "message"),
    [
        (b"zz\r\n", "chunk size 'zz' is not hexadecimal"),
        (b"0x1f\r\n", "chunk size '0x1f' is not hexadecimal"),  # int(s, 16) takes it
        (b"\r\n", "chunk size '' is not hexadecimal"),
        (b"3\r\nabcXY", "the data of a 3-byte chunk is not followed by CRLF"),
        (b"3\nabc\r\n", "chunk size line ends in a bare LF, not CRLF"),
        (b"1" * MAX_LINE, f"chunk size line longer than {MAX_LINE} B"),
        (b"3;" + b"x" * MAX_LINE, f"chunk size line longer than {MAX_LINE} B"),
        (b"0\r\nX-Note: " + b"x" * MAX_LINE, f"trailer field longer than {MAX_LINE} B"),
        (b'a\r\n{"tree"', "the connection closed mid-chunk"),
        (b"3\r\nabc", "the connection closed mid-chunk"),
        (b"3\r\nabc\r\n", "the connection closed before the last chunk"),
        (b"3\r\nabc\r\n0\r\nX-Note: 1\r\n", "the connection closed before the last chunk"),
    ],
)
def test_malformed_framing_is_a_400_that_ends_the_connection(
    base: str, framed: bytes, message: str
) -> None:
    (status, headers, answer), was_closed = exchange(base, request(framed), end=True)
    assert status == 400 and answer == {"error": f"body: {message}"}
    assert headers["connection"] == "close" and was_closed


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        (["Transfer-Encoding: gzip, chunked"], 501, "'gzip, chunked': only chunked is supported"),
        (["Transfer-Encoding: gzip", "Transfer-Encoding: chunked"], 501, "only chunked"),
        # RFC 9112 §6.3: chunked not last leaves the body's end unknown, a 400.
        (["Transfer-Encoding: identity"], 400, "'identity' does not end in chunked"),
        (["Transfer-Encoding: chunked, gzip"], 400, "does not end in chunked"),
    ],
)
def test_a_coding_other_than_chunked_is_refused_unread(
    base: str, headers: list[str], status: int, message: str
) -> None:
    (got, reply_headers, answer), was_closed = exchange(base, request(b"", *headers))
    assert got == status and answer["error"].startswith("header Transfer-Encoding: ")
    assert message in answer["error"], answer
    assert reply_headers["connection"] == "close" and was_closed


def test_chunked_in_an_http_1_0_request_is_refused(base: str) -> None:
    (status, _, answer), _ = exchange(base, request(chunks(DATA, 9), version="HTTP/1.0"))
    assert status == 400 and "not allowed in an HTTP/1.0 request" in answer["error"]


def test_chunked_frames_the_body_over_content_length_and_ends_the_connection(
    base: str, expected: Any
) -> None:
    # RFC 9112 §6.3: Transfer-Encoding overrides Content-Length; both may be smuggling.
    (status, headers, answer), was_closed = exchange(
        base, request(chunks(DATA, 9), "Content-Length: 5", "Transfer-Encoding: chunked")
    )
    assert (status, answer) == (200, expected)
    assert headers["connection"] == "close" and was_closed


def test_a_client_silent_mid_body_times_out(run_dir: Path) -> None:  # noqa: F811
    server = make_server(Models([run_dir]), port=0, quiet=True)
    server.RequestHandlerClass.timeout = 0.5
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        (status, headers, answer), _ = exchange(base, request(b'a\r\n{"tree"'))
        assert status == 408
        assert answer == {"error": "body: the last chunk did not arrive within 0.5 s"}
        assert headers["connection"] == "close"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("framed", "data"),
    [
        (chunks(DATA, 7), DATA),
        (DECORATED, DATA),
        (b"0\r\n\r\n", b""),
        # RFC 9112 §7.1's shape: extensions, data holding CRLF, a trailer field.
        (
            b"4\r\nWiki\r\n7;x=y\r\npedia i\r\nB\r\nn \r\nchunks.\r\n0\r\nExpires: 0\r\n\r\n",
            b"Wikipedia in \r\nchunks.",
        ),
    ],
)
def test_read_chunked_reads_through_the_final_crlf_and_no_further(
    framed: bytes, data: bytes
) -> None:
    stream = io.BytesIO(framed + b"GET / HTTP/1.1\r\n")
    assert read_chunked(stream, limit=MAX_BODY) == data
    assert stream.read() == b"GET / HTTP/1.1\r\n"


def test_read_chunked_counts_the_limit_in_decoded_bytes() -> None:
    assert read_chunked(io.BytesIO(chunks(DATA, 7)), limit=len(DATA)) == DATA
    with pytest.raises(RequestError, match=f"body over {len(DATA) - 1} B") as err:
        read_chunked(io.BytesIO(chunks(DATA, 7)), limit=len(DATA) - 1)
    assert err.value.status == 413
    # Framing is bounded too: 1-byte chunks whose extensions dwarf their data.
    framed = b"1;" + b"x" * 100 + b"\r\na\r\n"
    with pytest.raises(RequestError, match="chunk size lines and trailers over 1000 B"):
        read_chunked(io.BytesIO(framed * 20), limit=1000)
