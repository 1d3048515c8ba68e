"""``treeqa doctor -- python SCRIPT.py [ARGS]`` (or ``-- torchrun ... SCRIPT.py``, ``-- accelerate
launch ... SCRIPT.py``): run any PyTorch training script under the monitor."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from treeqa.cli.common import positive_int, subparser

EXAMPLE = (
    "treeqa doctor --json health.json --plot health.png -- python train.py --epochs 3\n"
    "  treeqa doctor --strict -- python -m mypackage.train\n"
    "  treeqa doctor -- torchrun --standalone --nproc-per-node 2 train.py  # every process"
)


def add_parser(subparsers: Any) -> None:
    parser = subparser(
        subparsers,
        "doctor",
        "Run a PyTorch training script under the training-health monitor and report findings.",
        EXAMPLE,
        usage="%(prog)s [-h] [options] -- COMMAND [ARGS ...]",
    )
    parser.add_argument(
        "--json",
        type=Path,
        dest="json_path",
        metavar="FILE",
        help="write the report (findings + series) here as JSON (default: none)",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        dest="plot_path",
        metavar="FILE",
        help="write a PNG plot here; needs matplotlib (default: none)",
    )
    parser.add_argument(
        "--every",
        type=positive_int,
        default=50,
        metavar="N",
        help="steps between sampled (hooked) steps (default: 50)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="stop the script (exit 3) on an error finding (default: report only)",
    )
    parser.add_argument(
        "command_line",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the training command to run, e.g. -- python train.py --epochs 3",
    )
    parser.set_defaults(run=run, accepts_overrides=True)


def run(args: argparse.Namespace) -> int:
    from treeqa.health import run_doctor

    command = list(args.command_line) + list(getattr(args, "overrides", None) or [])
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("give the script to run: treeqa doctor -- python SCRIPT.py [ARGS]")
    reexec_with_flags(command)
    if args.plot_path is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("--plot needs matplotlib: pip install 'treeqa[plot]'") from None
    code, _ = run_doctor(
        command,
        json_path=args.json_path,
        plot_path=args.plot_path,
        every=args.every,
        mode="strict" if args.strict else "on",
        stream=sys.stderr,
    )
    return code


def reexec_with_flags(command: list[str]) -> None:
    """``treeqa doctor -- python -O script.py`` (``-I``, ``-E``, ``-X dev`` ...): the script
    runs in this interpreter, so this process starts again with those options (asserts and
    ``if __debug__:`` blocks out, dev mode's checks on, ``PYTHON*`` variables ignored, as the
    script would run). Once: should an option not show in ``sys.flags`` the second time, the
    run says so rather than starting again."""
    from treeqa.health import processes, script

    if os.environ.pop(REEXEC, None) or processes.launcher_split(command):
        return  # (the script's environment is left as it was given)
    flags = script.parse(command).interpreter_flags()
    if flags:
        os.environ[REEXEC] = "1"
        os.execv(sys.executable, [sys.executable, *flags, *sys.orig_argv[1:]])


REEXEC = "TREEQA_DOCTOR_RESTARTED"
"""Set in the environment of a doctor started again with the script's interpreter options."""
