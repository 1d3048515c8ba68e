"""Helpers the subcommands share: example epilogs and the --json convention."""

from __future__ import annotations

import argparse
import json
from typing import Any


def subparser(subparsers: Any, name: str, help: str, example: str) -> argparse.ArgumentParser:
    return subparsers.add_parser(
        name,
        help=help,
        description=help,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def emit_json(payload: dict[str, Any]) -> None:
    """The last line of output: one machine-readable JSON object."""
    print(json.dumps(payload, sort_keys=True, default=float))


def format_metrics(metrics: dict[str, Any]) -> str:
    return "\n".join(
        f"  {k:<18} {v:.4f}" if isinstance(v, float) else f"  {k:<18} {v}"
        for k, v in metrics.items()
    )
