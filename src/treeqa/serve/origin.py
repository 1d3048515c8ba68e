"""Which requests ``treeqa serve`` answers: its own page's and a client's, not another site's.

A web page on any site can make a browser send a request to a server on the reader's machine:
a form posted across sites (no CORS preflight for a form's content types), or, by DNS
rebinding, a name of the attacker's that resolves first to their server, then to 127.0.0.1,
which lets their page read the answers as if it were the server's own. Two checks stop both,
and neither touches a client outside a browser (curl, requests, urllib send no Origin):

- ``Origin`` (a browser sends it with every cross-origin request and with every POST) must name
  the server the request came to: the host and port of its Host header (where Host gives no
  port, as a proxy may send it, the host on port 80 or 443), or a name in ``--allow-host``. A
  sandboxed frame sends ``Origin: null``: refused too.
- ``Host`` must be a loopback name (localhost, *.localhost), an IP address (no rebinding comes
  through a literal address) or a name in ``--allow-host``; on a server bound to an address
  other machines reach (``--host 0.0.0.0``), the machine's own name (and ``NAME.local``) too.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass
from http import HTTPStatus

from treeqa.serve.bodies import RequestError

DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None]:
    """``"Localhost:8000"`` -> ``("localhost", 8000)``; ``"[::1]"`` -> ``("::1", None)``.
    A port that does not read is ``-1``, which no server has; a value that does not read at all
    (``"[::1"``, ``"[evil.example]"``) is ``("", -1)``, no name of any server."""
    try:
        parts = urllib.parse.urlsplit("//" + value.strip())
    except ValueError:  # else a 500, or a page request dropped unanswered
        return ("", -1)
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
    """localhost and its subdomains (RFC 6761 §6.3), and every loopback address,
    ``::ffff:127.0.0.1`` included (Python before 3.13 calls it no loopback)."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    if not is_ip(name):
        return False
    address = ipaddress.ip_address(name)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def own_names() -> set[str]:
    """The names this machine goes by on a network without a DNS of its own: its host name and
    that name under ``.local`` (mDNS)."""
    name = socket.gethostname().lower().rstrip(".")
    return {name, f"{name}.local"} if name else set()


@dataclass(frozen=True)
class Guard:
    allow: frozenset[str]  # names answered beside loopback names and IP addresses, lower case

    @classmethod
    def for_address(cls, bound: str, allow: Collection[str] = ()) -> Guard:
        """``bound``: the address the socket is bound to, as ``getsockname()`` gives it; a name
        given to ``--host`` (the machine's own name, ``127.1``) may be loopback too. A server
        other machines can reach answers to this machine's own names too (as Vite and webpack's
        dev servers do since DNS rebinding was shown on them)."""
        names = {name.strip().lower().rstrip(".") for name in allow}
        if not is_loopback(bound.lower()):
            names |= own_names()
        return cls(frozenset(names))

    def check(self, origin: str | None, host: str | None, where: str = "header Host") -> None:
        """Raise a 403 for a request a page of another site made (see the module's doc).
        ``host``: what names the server, from ``where`` (an absolute-form target's authority
        stands for Host, RFC 9112 §3.2.2)."""
        host_name, host_port = split_host(host or "")
        if host is not None and not (
            is_ip(host_name) or is_loopback(host_name) or host_name in self.allow
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
        origin_port = origin_port or DEFAULT_PORTS.get(scheme)
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
