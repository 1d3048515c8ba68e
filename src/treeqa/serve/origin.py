"""Which requests ``treeqa serve`` answers: its own page's and a client's, not another site's.

A web page on any site can make a browser send a request to a server on the reader's machine:
a form posted across sites (no CORS preflight for a form's content types), or, by DNS
rebinding, a name of the attacker's that resolves first to their server, then to 127.0.0.1,
which lets their page read the answers as if it were the server's own. Two checks stop both,
and neither touches a client outside a browser (curl, requests, urllib send no Origin):

- ``Origin`` (a browser sends it with every cross-origin request and with every POST) must name
  the server the request came to: the host and port of its Host header (the host alone where
  Host gives no port, as a proxy may send it), or a name in ``--allow-host``. A sandboxed frame
  sends ``Origin: null``: refused too.
- ``Host``, on a server bound to a loopback address, must be a loopback name (localhost,
  *.localhost), an IP address (no rebinding comes through a literal address) or a name in
  ``--allow-host``. A server bound to another address takes any Host unless ``--allow-host``
  lists names.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass
from http import HTTPStatus

from treeqa.serve.bodies import RequestError

DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None]:
    """``"Localhost:8000"`` -> ``("localhost", 8000)``; ``"[::1]"`` -> ``("::1", None)``.
    A port that does not read is ``-1``, which no server has."""
    parts = urllib.parse.urlsplit("//" + value.strip())
    try:
        port = parts.port
    except ValueError:
        port = -1
    return ((parts.hostname or "").rstrip("."), port)


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(name: str) -> bool:
    """localhost and its subdomains (RFC 6761 §6.3), and every loopback address."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    return is_ip(name) and ipaddress.ip_address(name).is_loopback


@dataclass(frozen=True)
class Guard:
    allow: frozenset[str]  # names given with --allow-host, lower case
    any_host: bool  # bound to an address other than loopback, with no --allow-host

    @classmethod
    def for_address(cls, bound: str, allow: Collection[str] = ()) -> Guard:
        names = frozenset(name.strip().lower().rstrip(".") for name in allow)
        return cls(names, any_host=not names and not is_loopback(bound.lower()))

    def check(self, origin: str | None, host: str | None) -> None:
        """Raise a 403 for a request a page of another site made (see the module's doc)."""
        host_name, host_port = split_host(host or "")
        if host is not None and not (
            self.any_host or is_ip(host_name) or is_loopback(host_name) or host_name in self.allow
        ):
            raise RequestError(
                HTTPStatus.FORBIDDEN,
                f"header Host: {host!r} is not a name of this server (a page of another site, "
                "by DNS rebinding?); start it with --allow-host NAME to answer that name",
            )
        if origin is None:
            return
        parts = urllib.parse.urlsplit(origin.strip())
        scheme = parts.scheme.lower()
        origin_name, origin_port = split_host(parts.netloc)
        origin_port = origin_port or DEFAULT_PORTS.get(scheme)
        own = host is not None and origin_name == host_name
        own = own and host_port in (None, origin_port)  # no port in Host: a proxy's, perhaps
        if scheme not in DEFAULT_PORTS or not (own or (origin_name and origin_name in self.allow)):
            raise RequestError(
                HTTPStatus.FORBIDDEN,
                f"header Origin: {origin!r}: a page of another site may not use this server "
                "(behind a proxy that rewrites Host, give --allow-host with the public name)",
            )
