"""``treeqa`` command line: one module per subcommand, each a thin layer over the library."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from treeqa import __version__
from treeqa.cli import data, doctor, evaluate, flags, predict, serve, train
from treeqa.cli.common import escape_unencodable, join_flags, json_alone, reader_gone
from treeqa.data.output_dir import file_in_the_way

SUBCOMMANDS = (data, train, evaluate, predict, serve, doctor)
TASK_MODULES = {"train": train, "evaluate": evaluate, "predict": predict}
"""The commands with a task word: ``treeqa train qa``; without one, the task is sentiment."""
TASKS = ("sentiment", "qa")


def build_parser(task: str = "sentiment") -> argparse.ArgumentParser:
    """The ``treeqa`` parser, whose ``train``, ``evaluate`` and ``predict`` are ``task``'s."""
    parser = argparse.ArgumentParser(
        prog="treeqa",
        description="Tree-structured sentiment models on SST and QANet on SQuAD.",
        epilog="Run `treeqa COMMAND --help` for the options and an example of each command; "
        "`treeqa COMMAND qa --help` for the reading-comprehension side of train, evaluate and "
        "predict.",
    )
    parser.add_argument("--version", action="version", version=f"treeqa {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        if module in TASK_MODULES.values():
            module.add_parser(subparsers, task)
        else:
            module.add_parser(subparsers)
    return parser


def options(command: str, task: str) -> set[str]:
    """The flags of ``treeqa COMMAND TASK``."""
    parser = TASK_MODULES[command].add_parser(argparse.ArgumentParser().add_subparsers(), task)
    return {option for action in parser._actions for option in action.option_strings}


def other_task(task: str) -> str:
    return TASKS[1 - TASKS.index(task)]


def foreign_flags(command: str, task: str, extra: Sequence[str]) -> list[str]:
    """The flags among ``extra`` (arguments argparse did not take) that ``command`` takes for
    its other task only: ``--emblr`` given to ``train qa``. ``--tag-dim`` is ``--tag_dim``, as
    for config overrides."""
    if not extra:  # nothing to look up: no parsers to build
        return []
    other = other_task(task)

    def plain(flag: str) -> str:
        return flag.split("=", 1)[0].replace("-", "_")

    theirs = {plain(f): f for f in options(command, other) - options(command, task)}
    found = [theirs[plain(arg)] for arg in extra if arg.startswith("--") and plain(arg) in theirs]
    return list(dict.fromkeys(found))


def foreign_message(command: str, task: str, found: Sequence[str]) -> str:
    other = other_task(task)
    verb, them = ("is", "it") if len(found) == 1 else ("are", "them")
    message = (
        f"{join_flags(found)} {verb} for {flags.TASK_NAMES[other]}: treeqa {command} {other} "
        f"takes {them}, treeqa {command} {task} does not"
    )
    return "; ".join([message] + [flags.ELSEWHERE[f] for f in found if f in flags.ELSEWHERE])


def command_name(args: argparse.Namespace, task: str) -> str:
    """The words of the command that ran: ``data prepare squad``, ``train qa``."""
    words = [args.command, *(getattr(args, k, None) or "" for k in ("action", "dataset"))]
    if args.command in TASK_MODULES and task == "qa":
        words.insert(1, task)
    return " ".join(w for w in words if w)


def check_paths(args: argparse.Namespace) -> None:
    """Every path given (file or folder, read or written) has no file among its folders: the
    system's "[Errno 20] Not a directory", deep in a command, named neither."""
    for value in vars(args).values():
        for path in value if isinstance(value, list) else [value]:
            if isinstance(path, Path) and (above := file_in_the_way(path)):
                raise NotADirectoryError(f"{path}: {above} is a file, not a folder")


def extra_missing(err: ImportError) -> bool:
    """Whether ``err`` says a package outside treeqa is not installed (spaCy to parse text,
    say), itself or as the error it was raised from; not an import of treeqa's own failing."""
    for cause in (err, err.__cause__):
        if isinstance(cause, ModuleNotFoundError) and cause.name:
            return cause.name.partition(".")[0] != "treeqa"
    return False


def error_text(err: Exception) -> str:
    """What follows "error:" for ``err``: its own words, or for an error only the system worded
    ("[Errno 21] Is a directory: 'x'") the path first, as treeqa's own errors name it."""
    if isinstance(err, OSError) and err.strerror and err.filename is not None:
        both = f"{err.filename} -> {err.filename2}" if err.filename2 is not None else err.filename
        return f"{both}: {err.strerror}"
    return str(err)


def main(argv: Sequence[str] | None = None) -> int:
    own_process = argv is None  # the treeqa command itself, not a call from Python
    argv = list(sys.argv[1:] if argv is None else argv)
    if own_process:
        escape_unencodable()
    # `treeqa train sentiment ...` / `treeqa evaluate qa ...`: the task word is not an argparse
    # positional, so override values such as `--emblr 0` can never be taken for it.
    task = "sentiment"
    if len(argv) > 1 and argv[0] in TASK_MODULES and argv[1] in TASKS:
        task = argv.pop(1)
    args, extra = build_parser(task).parse_known_args(argv)
    found = foreign_flags(args.command, task, extra) if args.command in TASK_MODULES else []
    if found or (extra and not getattr(args, "accepts_overrides", False)):
        why = (
            foreign_message(args.command, task, found)
            if found
            else f"unrecognised arguments: {' '.join(extra)}"
        )
        print(f"treeqa {command_name(args, task)}: error: {why}", file=sys.stderr)
        return 2
    args.overrides = extra
    name = command_name(args, task)
    # Commands that run a model (not `evaluate qa --predictions`, which scores text, nor the
    # doctor, which runs a script as python would): torch imported only for them.
    computes = args.command in ("train", "evaluate", "predict", "serve")
    if own_process and computes and not getattr(args, "predictions", None):
        from treeqa.train.loop import flush_denormals

        # Before any thread is started: torch's CPU threads start with the flag as it is then.
        flush_denormals()
    try:
        check_paths(args)
        # predict's --json is its stream of results, one line each; the others' a last object.
        with json_alone(getattr(args, "json", False) is True and args.command != "predict"):
            code = int(args.run(args) or 0)
        if not sys.stdout.closed:  # (a script under the doctor may close it, as python lets it)
            sys.stdout.flush()  # here, not at exit, so that a reader gone early is said as below
        return code
    except BrokenPipeError:  # `treeqa data stats DIR | head -1`, `treeqa predict ... | head`
        return reader_gone()
    except (ValueError, OSError) as err:
        print(f"treeqa {name}: error: {error_text(err)}", file=sys.stderr)
        return 2
    except ImportError as err:
        if not extra_missing(err):  # a bug of treeqa's own: its traceback
            raise
        print(f"treeqa {name}: error: {err}", file=sys.stderr)  # names the extra to install
        return 2
    except KeyboardInterrupt as stop:
        # Ctrl-C, or a training run's loop.Interrupted (SIGINT or SIGTERM, after it saved
        # itself): the shell's 128 + signal, without a traceback.
        print(f"treeqa {name}: {str(stop) or 'interrupted'}", file=sys.stderr)
        if own_process and threading.current_thread() is threading.main_thread():
            # A Ctrl-C more while Python shuts down (a second press, say) ends the process
            # there, as the shell expects, not with a traceback from an exit handler.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        return 128 + int(getattr(stop, "signum", signal.SIGINT))
