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


@pytest.mark.parametrize(
    ("request_head", "header"),
    [
        (b"POST /api/sentiment HTTP/1.1\r\nHost: [::1", "header Host: '[::1'"),
        (b"POST /api/sentiment HTTP/1.1\r\nHost: [evil.example]", "header Host: '[evil.example]'"),
        (b"GET / HTTP/1.1\r\nHost: [::1", "header Host: '[::1'"),
        (
            b"POST /api/sentiment HTTP/1.1\r\nHost: localhost\r\nOrigin: http://[::1",
            "header Origin",
        ),
        (b"GET http://[::1/api/health HTTP/1.1\r\nHost: localhost", "request target's host"),
    ],
)
def test_a_host_or_origin_that_does_not_read_is_refused_naming_it(
    address: str, request_head: bytes, header: str
) -> None:
    # urlsplit raised on an unclosed or a non-address "[...]": a 500, or no answer at all.
    request = request_head + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    status, _, data = raw_request(f"http://{address}", request)
    assert status.split()[1] == "403", data
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


def test_the_cli_takes_allow_host_repeated() -> None:
    args = build_parser().parse_args(
        ["serve", "r", "--allow-host", "a.example", "--allow-host", "b"]
    )
    assert args.allow_host == ["a.example", "b"]


@pytest.mark.parametrize("given", ["https://sentiment.example", "sentiment.example:443", "*"])
def test_the_cli_refuses_an_allow_host_that_no_request_could_match(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Names are matched alone: with a scheme or port it was taken and every request refused.
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "r", "--allow-host", given])
    err = capsys.readouterr().err
    assert "--allow-host" in err and repr(given) in err
