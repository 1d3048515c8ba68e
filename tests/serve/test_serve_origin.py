"""``treeqa serve`` answers its own page and clients outside a browser, not other sites' pages:
a cross-site form post or fetch (Origin) and DNS rebinding (Host) are 403s."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_serve import TREE, raw_request, run_dir, serving  # noqa: F401 - run_dir: a fixture

from treeqa.cli.main import build_parser
from treeqa.serve.bodies import RequestError
from treeqa.serve.origin import Guard

BODY = json.dumps({"tree": TREE})


@pytest.fixture(scope="module")
def address(run_dir: Path) -> Iterator[str]:  # noqa: F811
    with serving(run_dir) as url:
        yield url.removeprefix("http://")


@pytest.fixture(scope="module")
def allowing(run_dir: Path) -> Iterator[str]:  # noqa: F811
    with serving(run_dir, allow_hosts=["Sentiment.Example"]) as url:
        yield url.removeprefix("http://")


def post(address: str, headers: dict[str, str], path: str = "/api/sentiment") -> tuple[int, dict]:
    """POST the tree with ``headers`` (Host as given there, else http.client's own)."""
    connection = http.client.HTTPConnection(address, timeout=30)
    connection.putrequest("POST", path, skip_host="Host" in headers)
    for name, value in {**headers, "Content-Length": str(len(BODY))}.items():
        connection.putheader(name, value)
    connection.endheaders(BODY.encode())
    response = connection.getresponse()
    status, data = response.status, json.loads(response.read())
    connection.close()
    return status, data


def test_a_client_outside_a_browser_and_the_servers_own_page_are_answered(address: str) -> None:
    assert post(address, {})[0] == 200  # curl: no Origin, Host 127.0.0.1:PORT
    port = address.split(":")[1]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "app.localhost"):
        own = {"Host": host, "Origin": f"http://{host}"}
        assert post(address, own)[0] == 200, host


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "null",
        "http://127.0.0.1:1",
        "file://",
        "https://localhost.evil.example",
    ],
)
def test_a_page_of_another_origin_is_refused_naming_the_header(address: str, origin: str) -> None:
    status, body = post(address, {"Origin": origin})
    assert status == 403
    assert body["error"].startswith(f"header Origin: {origin!r}")


def test_a_rebound_name_is_refused_on_a_loopback_server(address: str) -> None:
    port = address.split(":")[1]
    status, body = post(
        address, {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
    )
    assert status == 403 and "header Host: 'evil.example:" in body["error"]
    assert "--allow-host" in body["error"]
    connection = http.client.HTTPConnection(address, timeout=30)
    connection.request("GET", "/api/health", headers={"Host": "evil.example"})
    assert connection.getresponse().status == 403  # read routes too: rebinding reads answers
    connection.close()


def test_a_host_given_twice_is_a_400(address: str) -> None:
    status, body = post(address, {"Host": "localhost", "host": "evil.example"})
    assert status == 400 and "Host" in body["error"]


@pytest.mark.parametrize("target", ["/api/health", "/", "http://localhost/api/health"])
def test_an_http_1_1_request_without_host_is_a_400(address: str, target: str) -> None:
    # RFC 9112 §3.2: a server must answer 400 to an HTTP/1.1 request that lacks Host; it was
    # answered. HTTP/1.0 has no Host to require.
    close = " HTTP/1.1\r\nConnection: close\r\n\r\n"
    status, _, data = raw_request(f"http://{address}", f"GET {target}{close}".encode())
    assert status.split()[1] == "400"
    assert json.loads(data)["error"].startswith("header Host: missing")
    status, _, _ = raw_request(f"http://{address}", f"GET {target} HTTP/1.0\r\n\r\n".encode())
    assert status.split()[1] == "200"


@pytest.mark.parametrize(
    ("request_head", "status", "header"),
    [
        # A Host that does not read is a 400 (RFC 9112 §3.2); an Origin, a page's refusal.
        (b"POST /api/sentiment HTTP/1.1\r\nHost: [::1", 400, "header Host: '[::1'"),
        (
            b"POST /api/sentiment HTTP/1.1\r\nHost: [evil.example]",
            400,
            "header Host: '[evil.example]'",
        ),
        (b"GET / HTTP/1.1\r\nHost: [::1", 400, "header Host: '[::1'"),
        (
            b"POST /api/sentiment HTTP/1.1\r\nHost: localhost\r\nOrigin: http://[::1",
            403,
            "header Origin",
        ),
        (b"GET http://[::1/api/health HTTP/1.1\r\nHost: localhost", 400, "request target's host"),
        # A port out of range or not a number, and what is no host and port, read as
        # localhost: answered, and an Origin with the same unreadable port taken for the page's.
        (
            b"GET /api/health HTTP/1.1\r\nHost: localhost:99999",
            400,
            "header Host: 'localhost:99999'",
        ),
        (
            b"POST /api/sentiment HTTP/1.1\r\nHost: localhost:x\r\nOrigin: http://localhost:x",
            400,
            "header Host: 'localhost:x'",
        ),
        (b"GET / HTTP/1.1\r\nHost: localhost:-1", 400, "header Host: 'localhost:-1'"),
        (b"GET / HTTP/1.1\r\nHost: evil@localhost", 400, "header Host: 'evil@localhost'"),
        (b"GET / HTTP/1.1\r\nHost: localhost#.evil", 400, "header Host: 'localhost#.evil'"),
        (b"GET / HTTP/1.1\r\nHost: localhost:80 a", 400, "header Host: 'localhost:80 a'"),
        (b"GET / HTTP/1.1\r\nHost: ", 400, "header Host: ''"),
        (b"GET http://localhost:99999/ HTTP/1.1\r\nHost: localhost", 400, "request target's"),
    ],
)
def test_a_host_or_origin_that_does_not_read_is_refused_naming_it(
    address: str, request_head: bytes, status: int, header: str
) -> None:
    # urlsplit raised on an unclosed or a non-address "[...]": a 500, or no answer at all.
    request = request_head + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    line, _, data = raw_request(f"http://{address}", request)
    assert line.split()[1] == str(status), data
    assert json.loads(data)["error"].startswith(header)


def test_an_absolute_form_target_is_checked_by_its_host_not_by_the_host_header(
    address: str,
) -> None:
    # RFC 9112 §3.2.2: the target's authority names the server and Host is ignored; the guard
    # read Host while the request was routed by the target.
    port = address.split(":")[1]
    close = "\r\nConnection: close\r\n\r\n"
    rebound = f"GET http://evil.example:{port}/api/health HTTP/1.1\r\nHost: localhost:{port}"
    status, _, data = raw_request(f"http://{address}", (rebound + close).encode())
    assert status.split()[1] == "403"
    assert json.loads(data)["error"].startswith(f"request target's host: 'evil.example:{port}'")
    own = f"GET http://localhost:{port}/api/health HTTP/1.1\r\nHost: evil.example"
    status, _, data = raw_request(f"http://{address}", (own + close).encode())
    assert status.split()[1] == "200" and json.loads(data)["status"] == "ok"


@pytest.mark.parametrize("bind", ["127.1", "2130706433"])
def test_a_loopback_address_given_another_way_keeps_the_host_check(
    run_dir: Path,  # noqa: F811
    bind: str,
) -> None:
    # --host 127.1 (or the machine's own name, which Debian maps to 127.0.1.1) binds loopback,
    # but the guard read the string as given: no loopback address, so any Host was answered.
    with serving(run_dir, host=bind) as url:
        assert post(url.removeprefix("http://"), {"Host": "evil.example"})[0] == 403
        assert post(url.removeprefix("http://"), {})[0] == 200


def test_a_host_written_as_a_loopback_address_another_way_is_answered(address: str) -> None:
    # "127.1" (or 2130706433, 0x7f.1) names 127.0.0.1 as --host and a browser's URL parser read
    # it, never a name looked up in DNS; the guard took it for a name of another site: a 403.
    port = address.split(":")[1]
    for host in ("127.1", "2130706433", "0x7f.1", "[0:0::1]"):
        assert post(address, {"Host": f"{host}:{port}"})[0] == 200, host
    assert post(address, {"Host": f"127.1:{port}", "Origin": f"http://127.0.0.1:{port}"})[0] == 200
    assert post(address, {"Origin": f"http://[0::1]:{port}", "Host": f"[::1]:{port}"})[0] == 200
    for host in ("127.1.evil.example", "0x7f.evil"):
        assert post(address, {"Host": f"{host}:{port}"})[0] == 403, host
    assert post(address, {"Host": f"127.1:{port}", "Origin": "http://127.1:1"})[0] == 403


def test_allow_host_adds_a_name_for_host_and_origin(allowing: str) -> None:
    proxied = {"Host": "sentiment.example", "Origin": "https://sentiment.example"}
    assert post(allowing, proxied)[0] == 200
    rewritten = {"Host": "127.0.0.1:8000", "Origin": "https://SENTIMENT.example"}  # a proxy's
    assert post(allowing, rewritten)[0] == 200
    assert post(allowing, {"Host": "other.example"})[0] == 403


def test_the_rules_of_the_guard() -> None:
    loopback = Guard.for_address("127.0.0.1")
    loopback.check(None, "LOCALHOST.:8000")
    loopback.check("http://192.168.1.5:8000", "192.168.1.5:8000")  # an address: no rebinding
    with pytest.raises(RequestError):  # the server's name, but another port
        loopback.check("http://localhost:3000", "localhost:8000")
    with pytest.raises(RequestError):  # no port in Origin: port 80, not the server's
        loopback.check("http://localhost", "localhost:8000")
    loopback.check("https://localhost", "localhost")  # Host without a port: a proxy's, perhaps
    with pytest.raises(RequestError):  # ... but then a page on another port is another site
        loopback.check("http://localhost:3000", "localhost")
    exposed = Guard.for_address("0.0.0.0")  # bound for others: the machine's own names too
    own = socket.gethostname().lower()
    exposed.check(None, f"{own.upper()}:8000")
    exposed.check(f"http://{own}.local:8000", f"{own}.local:8000")
    exposed.check("http://192.168.1.5:8000", "192.168.1.5:8000")
    with pytest.raises(RequestError):  # any other name: a page of another site, rebound
        exposed.check(None, "evil.example:8000")
    with pytest.raises(RequestError):
        exposed.check("http://evil.example", f"{own}:8000")
    with pytest.raises(RequestError):  # the machine's name is no loopback server's
        loopback.check(None, f"{own}.local")
    named = Guard.for_address("::", ["box.lan"])
    named.check(None, "box.lan")
    with pytest.raises(RequestError):
        named.check(None, "evil.example")
    assert Guard.for_address("::1") == loopback
    assert Guard.for_address("::ffff:127.0.0.1") == loopback  # Python < 3.13: "no loopback"
    with pytest.raises(RequestError):  # neither names a server: not "the same name"
        exposed.check("http://[x", "[y")
    with pytest.raises(RequestError):  # no page is served from port 0: no port 80 either
        loopback.check("http://localhost:0", "localhost:80")


def test_allow_host_of_a_domain_answers_the_names_under_it(run_dir: Path) -> None:  # noqa: F811
    # "--allow-host .example.dev": that domain and every name under it in Host, as Django's
    # ALLOWED_HOSTS and Vite's allowedHosts read it, for a forwarder that names each instance.
    with serving(run_dir, allow_hosts=[".Example.dev."]) as url:
        address = url.removeprefix("http://")
        for name in ("example.dev", "app-8000.example.dev", "a.b.example.dev"):
            assert post(address, {"Host": name, "Origin": f"https://{name}"})[0] == 200, name
        for name in ("evilexample.dev", "example.dev.evil.example", "dev"):
            assert post(address, {"Host": name})[0] == 403, name


def test_allow_host_of_a_domain_trusts_no_other_page_under_it() -> None:
    # Others may put pages under a shared domain (a forwarder's): a page's Origin must be the
    # name the request came to, not any name of the domain.
    guard = Guard.for_address("127.0.0.1", [".example.dev"])
    guard.check("https://mine.example.dev", "mine.example.dev")
    with pytest.raises(RequestError, match="header Origin"):
        guard.check("https://theirs.example.dev", "mine.example.dev")
    with pytest.raises(RequestError, match="header Origin"):  # Host rewritten: no name to match
        guard.check("https://mine.example.dev", "127.0.0.1:8000")
    with pytest.raises(RequestError, match="header Origin"):  # a domain is no page's name
        guard.check("http://.example.dev", "127.0.0.1:8000")


@pytest.mark.parametrize("given", [".", ".com", "..example.dev", "a..example", ".example.dev:443"])
def test_the_cli_refuses_an_allow_host_domain_too_wide_or_malformed(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "r", "--allow-host", given])
    err = capsys.readouterr().err
    assert "--allow-host" in err and repr(given) in err
    with pytest.raises(ValueError, match="allowed host"):  # the library refuses it too
        Guard.for_address("127.0.0.1", [given])


def test_the_cli_takes_allow_host_repeated() -> None:
    args = build_parser().parse_args(
        ["serve", "r", "--allow-host", "a.example", "--allow-host", "b", "--allow-host", ".c.dev"]
    )
    assert args.allow_host == ["a.example", "b", ".c.dev"]


@pytest.mark.parametrize("given", ["https://sentiment.example", "sentiment.example:443", "*"])
def test_the_cli_refuses_an_allow_host_that_no_request_could_match(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Names are matched alone: with a scheme or port it was taken and every request refused.
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "r", "--allow-host", given])
    err = capsys.readouterr().err
    assert "--allow-host" in err and repr(given) in err
