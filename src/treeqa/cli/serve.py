"""``treeqa serve``: trained checkpoints behind a JSON API and a web page."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from treeqa.cli.common import subparser, tcp_port
from treeqa.serve.origin import allow_name  # the standard library's modules only

EXAMPLE = (
    "treeqa serve runs/tl runs/qanet --port 8000     # then open http://127.0.0.1:8000/\n"
    '  curl -s localhost:8000/api/sentiment -d \'{"tree": "(((the) (film)) ((is) ((not) (good))))"}\''
)


def add_parser(subparsers: Any) -> None:
    parser = subparser(
        subparsers,
        "serve",
        "Serve trained models (one sentiment, one QA) over HTTP: JSON API and a web page.",
        EXAMPLE,
    )
    parser.add_argument(
        "checkpoints",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="run directories or checkpoint files: at most one sentiment and one QA model",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind, IPv4 or IPv6 (::1, ::) (default: 127.0.0.1, this machine only)",
    )
    parser.add_argument(
        "--port", type=tcp_port, default=8000, help="TCP port; 0 picks a free one (default: 8000)"
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        type=host_name,
        metavar="NAME",
        help="a name the server answers to beside loopback names and IP addresses (repeat for "
        "more), or .DOMAIN for that domain and every name under it (in Host; a page's Origin "
        "must then be the name its request went to); a request naming another in Host or "
        "Origin is refused, against cross-site requests and DNS rebinding (default: none; bound "
        "to an address other machines reach, the machine's own name and NAME.local are "
        "answered too)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    parser.add_argument(
        "--quiet", action="store_true", help="do not log each request (default: log them)"
    )
    parser.set_defaults(run=run)


def host_name(text: str) -> str:
    """An argparse type: a name or ``.domain`` for --allow-host (``serve.origin.allow_name``)."""
    try:
        allow_name(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return text


def run(args: argparse.Namespace) -> int:
    from treeqa.serve.app import make_server
    from treeqa.serve.models import Models

    models = Models(args.checkpoints, args.device)
    try:
        server = make_server(models, args.host, args.port, args.quiet, args.allow_host)
    except OSError as err:  # a port in use, a host name that does not resolve
        raise OSError(f"cannot listen on {args.host}:{args.port}: {err.strerror or err}") from err
    host, port = str(server.server_address[0]), int(server.server_address[1])
    host = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    print(f"treeqa serve: http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    server.serve_until_stopped(lambda line: print(line, flush=True))
    return 0
