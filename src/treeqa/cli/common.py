"""Helpers the subcommands share: example epilogs, argument checks and the --json convention."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any


def subparser(subparsers: Any, name: str, help: str, example: str) -> argparse.ArgumentParser:
    return subparsers.add_parser(
        name,
        help=help,
        description=help,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)  # argparse reports a ValueError as "invalid positive_int value"
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text}")
    return value


def fraction(text: str) -> float:
    """An argparse type: a number in [0, 1]."""
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return value


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0-65535, got {text}")
    return value


def check_out(args: argparse.Namespace) -> None:
    """A resumed run continues in its own directory: an --out elsewhere would be ignored."""
    resume, out = getattr(args, "resume", None), getattr(args, "out", None)
    if resume is not None and out is not None and out.resolve() != resume.resolve():
        raise ValueError(
            f"--out {out} with --resume {resume}: a resumed run continues in {resume}; drop --out"
        )


def emit_json(payload: dict[str, Any]) -> None:
    """The last line of output: one machine-readable JSON object."""
    print(json.dumps(payload, sort_keys=True, default=float))


def format_metrics(metrics: dict[str, Any]) -> str:
    return "\n".join(
        f"  {k:<18} {v:.4f}" if isinstance(v, float) else f"  {k:<18} {v}"
        for k, v in metrics.items()
    )


def named_overrides(args: argparse.Namespace, named: Sequence[str]) -> list[tuple[str, str]]:
    """(key, value) of the flags in ``named`` that were given. argparse reads these itself, so
    their place among the other overrides is lost: they go first, and ``merge_overrides``
    refuses a later override that sets the same key otherwise."""
    return [(k, str(getattr(args, k))) for k in named if getattr(args, k, None) is not None]


STRICT_STOP = 3
"""The exit code of a run the health monitor stopped in strict mode (as ``treeqa doctor``)."""


def exit_code(result: dict[str, Any], out: Any) -> int:
    """0 for a run that finished; STRICT_STOP, said on stderr, for one the monitor stopped."""
    if not result.get("aborted"):
        return 0
    print(
        f"stopped by the health monitor (strict); {out}/health.json says why; its checkpoints, "
        "if any, are from before the stop",
        file=sys.stderr,
    )
    return STRICT_STOP
