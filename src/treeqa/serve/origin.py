"""Which requests ``treeqa serve`` answers: its own page's and a client's, not another site's.

A web page on any site can make a browser send a request to a server on the reader's machine:
a form posted across sites (no CORS preflight for a form's content types), or, by DNS
rebinding, a name of the attacker's that resolves first to their server, then to 127.0.0.1,
which lets their page read the answers as if it were the server's own. Two checks stop both,
and neither touches a client outside a browser (curl, requests, urllib send no Origin):

- ``Origin`` (a browser sends it with every cross-origin request and with every POST) must name
  the server the request came to: the host and port of its Host header (where Host gives no
  port, as a proxy may send it, the host on port 80 or 443), or a name in ``--allow-host``. A
  sandboxed frame sends ``Origin: null``: refused too. (A Host that does not read is a 400.)
- ``Host`` must be a loopback name (localhost, *.localhost), an IP address however written
  (no rebinding comes through a literal address) or a name in ``--allow-host``, or one under a
  ``.domain`` there; on a server bound to an address other machines reach (``--host
  0.0.0.0``), the machine's own name (and ``NAME.local``) too.

``Forwarded`` and ``X-Forwarded-Host`` are not read: a page served by DNS rebinding is of the
server's origin to the browser, and may set them.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass
from http import HTTPStatus

from treeqa.serve.bodies import RequestError

DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None]:
    """``"Localhost:8000"`` -> ``("localhost", 8000)``; ``"[::1]"`` -> ``("::1", None)``;
    ``"127.1"`` -> ``("127.0.0.1", None)`` (an address as Python writes it: two ways to write
    one are one name). A port that does not read (``"localhost:99999"``) is ``-1``, which no
    server has; a value that does not read at all (``"[::1"``, ``"[evil.example]"``, a user,
    path or space: ``"evil@localhost"``) is ``("", -1)``, no name of any server."""
    if re.search(r"[@/?#\\\s]", value.strip()):  # urlsplit reads "evil@localhost" as localhost
        return ("", -1)
    try:
        parts = urllib.parse.urlsplit("//" + value.strip())
    except ValueError:  # else a 500, or a page request dropped unanswered
        return ("", -1)
    try:
        port = parts.port
    except ValueError:
        port = -1
    name = (parts.hostname or "").rstrip(".")
    address = as_address(name)
    return (name if address is None else str(address), port)  # "127.1" -> "127.0.0.1"


def as_address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``name`` as an IP address, or None. An IPv4 address may be written as ``inet_aton``
    reads it (``127.1``, ``2130706433``, ``0x7f.1``), as ``--host`` takes it and as a browser's
    URL parser does, which looks no such name up in DNS."""
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    if not re.fullmatch(r"[0-9a-fx.]+", name):  # inet_aton reads "127.0.0.1 evil" as 127.0.0.1
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:
        return None


def is_ip(name: str) -> bool:
    return as_address(name) is not None


def is_loopback(name: str) -> bool:
    """localhost and its subdomains (RFC 6761 §6.3), and every loopback address,
    ``::ffff:127.0.0.1`` included (Python before 3.13 calls it no loopback)."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address = as_address(name)
    if address is None:
        return False
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def own_names() -> set[str]:
    """The names this machine goes by on a network without a DNS of its own: its host name and
    that name under ``.local`` (mDNS)."""
    name = socket.gethostname().lower().rstrip(".")
    return {name, f"{name}.local"} if name else set()


def allow_name(text: str) -> str:
    """A name given to ``--allow-host``, as Host and Origin are matched against it (lower case,
    no trailing dot): a name alone, or ``.domain`` for that domain and every name under it (as
    Django's ALLOWED_HOSTS and Vite's allowedHosts read it). ValueError for what no request could
    match (a scheme, port, path or ``*``, an empty label) and for a domain of one label (``.``,
    ``.com``, ``.lan``): every site under a top-level domain."""
    name = text.strip().lower().rstrip(".")
    if not name or any(c in name for c in ":/@[]* ") or "" in name.removeprefix(".").split("."):
        raise ValueError(
            f"allowed host {text!r}: expected a host name such as sentiment.example, or "
            ".example.dev for a domain and the names under it (no scheme, port, path or *)"
        )
    if name.startswith(".") and "." not in name[1:]:
        raise ValueError(
            f"allowed host {text!r}: a domain of one label answers every site under it; give "
            "one of two labels or more (.example.dev), or the names themselves"
        )
    return name


@dataclass(frozen=True)
class Guard:
    allow: frozenset[str]  # names answered beside loopback names and IP addresses, lower case
    domains: frozenset[str] = frozenset()  # answered with every name under them, in Host only

    @classmethod
    def for_address(cls, bound: str, allow: Collection[str] = ()) -> Guard:
        """``bound``: the address the socket is bound to, as ``getsockname()`` gives it; a name
        given to ``--host`` (the machine's own name, ``127.1``) may be loopback too. A server
        other machines can reach answers to this machine's own names too (as Vite and webpack's
        dev servers do since DNS rebinding was shown on them). ``allow``: names and ``.domain``s
        (``allow_name``)."""
        given = {allow_name(name) for name in allow}
        names = {name for name in given if not name.startswith(".")}
        if not is_loopback(bound.lower()):
            names |= own_names()
        return cls(frozenset(names), frozenset(given - names))

    def answers(self, name: str) -> bool:
        """Whether Host may name ``name``: a name allowed, or the name of an allowed domain
        or one under it. Not Origin: others may put pages under a shared domain (a forwarder's),
        so a page must come from the name its request went to, or from a name allowed."""
        return name in self.allow or any(f".{name}".endswith(domain) for domain in self.domains)

    def check(self, origin: str | None, host: str | None, where: str = "header Host") -> None:
        """Raise a 403 for a request a page of another site made (see the module's doc), a 400
        for a ``host`` that does not read.
        ``host``: what names the server, from ``where`` (an absolute-form target's authority
        stands for Host, RFC 9112 §3.2.2)."""
        host_name, host_port = split_host(host or "")
        if host is not None and (host_name == "" or host_port == -1):  # RFC 9112 §3.2: a 400
            raise RequestError(
                HTTPStatus.BAD_REQUEST,
                f"{where}: {host!r} does not read as a host name and a port (0-65535)",
            )
        if host is not None and not (
            is_ip(host_name) or is_loopback(host_name) or self.answers(host_name)
        ):
            raise RequestError(
                HTTPStatus.FORBIDDEN,
                f"{where}: {host!r} is not a name of this server (a page of another site, "
                "by DNS rebinding?); start it with --allow-host NAME to answer that name",
            )
        if origin is None:
            return
        scheme, _, authority = origin.strip().partition("://")  # not urlsplit: it raises on "["
        scheme = scheme.lower()
        origin_name, origin_port = split_host(authority.split("/")[0])
        origin_port = DEFAULT_PORTS.get(scheme) if origin_port is None else origin_port
        own = origin_name != "" and origin_name == host_name  # "": no name that reads
        # No port in Host (a proxy's, perhaps): the page's must be a default one, 80 or 443.
        ports = DEFAULT_PORTS.values() if host_port is None else (host_port,)
        own = own and origin_port in ports
        if scheme not in DEFAULT_PORTS or not (own or (origin_name and origin_name in self.allow)):
            raise RequestError(
                HTTPStatus.FORBIDDEN,
                f"header Origin: {origin!r}: a page of another site may not use this server "
                "(behind a proxy that rewrites Host, give --allow-host with the public name)",
            )
