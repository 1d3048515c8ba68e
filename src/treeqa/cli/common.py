"""Helpers the subcommands share: example epilogs, argument checks, the --json convention and
streamed output (stdin input, a reader that goes away)."""

from __future__ import annotations

import argparse
import codecs
import contextlib
import json
import math
import os
import re
import signal
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any


def subparser(
    subparsers: Any,
    name: str,
    help: str,
    example: str,
    *,
    description: str = "",
    prog: str = "",
    usage: str | None = None,
) -> argparse.ArgumentParser:
    """A command's parser: ``help`` is its line in the parent's list, ``description`` (default
    ``help``; paragraphs apart by a blank line) heads its own --help, and ``example`` ends it."""
    return subparsers.add_parser(
        name,
        help=help,
        description="\n\n".join(textwrap.fill(p, 88) for p in (description or help).split("\n\n")),
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=usage,
        **({"prog": prog} if prog else {}),
    )


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)  # argparse reports a ValueError as "invalid positive_int value"
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text}")
    return value


def natural_int(text: str) -> int:
    """An argparse type: a whole number of at least 0 (a seed)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {text}")
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
    """A resumed run continues in its own directory with its own config: an --out elsewhere
    or a --config would be ignored. A run directory is a folder, never a file."""
    resume, out = getattr(args, "resume", None), getattr(args, "out", None)
    if resume is not None and out is not None and out.resolve() != resume.resolve():
        raise ValueError(
            f"--out {out} with --resume {resume}: a resumed run continues in {resume}; drop --out"
        )
    if resume is not None and getattr(args, "config", None) is not None:
        raise ValueError(
            f"--config {args.config} with --resume {resume}: a resumed run keeps its own "
            f"{resume / 'config.toml'}; drop --config and give what may change as flags "
            "(--epochs N, --train.patience=N, ...)"
        )
    for flag, path in (("--resume", resume), ("--out", out)):
        if path is not None and path.exists() and not path.is_dir():
            raise ValueError(f"{flag} {path} is a file; a run directory is a folder")
    if resume is None:
        return
    if not resume.is_dir():
        raise ValueError(f"--resume {resume}: no such run directory")
    restore_config(resume)
    if not (resume / "config.toml").exists() and not any(resume.glob("*.safetensors")):
        raise ValueError(
            f"--resume {resume}: the run stopped before it wrote its config.toml (while it read "
            "its data), so it trained nothing and its settings are not known: run the command "
            f"that started it again, with --out {resume}"
        )


def say_if_amp_does_nothing(args: argparse.Namespace, train: Any) -> None:
    """``--train.amp=bf16|fp16`` asked for on a machine that trains on its CPU: autocast
    applies on a GPU only, so say it trains in float32 (a config's own default is not said;
    under torchrun, process 0 says it)."""
    from treeqa.config import parse_overrides
    from treeqa.train.callbacks import say
    from treeqa.train.loop import AMP_DEVICES, resolve_device

    asked = any(k in ("amp", "train.amp") for k, _ in parse_overrides(args.overrides))
    if asked and train.amp != "off":
        device = resolve_device(train.device)
        if device.type not in AMP_DEVICES:
            say(f"train.amp = {train.amp} does nothing on {device.type}: it trains in float32")


def restore_config(run: Path) -> None:
    """A run directory whose config.toml was deleted gets it back from its last checkpoint,
    which records the settings (checkpoints of earlier treeqa versions do not); one that does
    not read (cut short, not UTF-8) is an error that says so, and is left as it is."""
    from treeqa.config import ConfigError, load_toml
    from treeqa.train import checkpoint as ckpt

    config = run / "config.toml"
    if not (run / ckpt.LAST).is_file():
        return
    try:
        recorded = ckpt.read_meta(run, prefer=ckpt.LAST).get("config")
    except ckpt.CheckpointError:
        return  # resuming says what is wrong with it
    if not isinstance(recorded, str) or not recorded.strip():
        return
    if config.is_file():
        try:
            load_toml(config)
        except ConfigError as err:  # cut short, or edited into something that does not read
            raise ConfigError(
                f"{err}. {run / ckpt.LAST} records the run's settings: fix {config}, or remove "
                "it and --resume writes it again from them"
            ) from None
        return
    if not config.exists():
        ckpt.write_text_atomic(config, recorded)
        print(f"{config} was missing: restored from {ckpt.LAST}, which records the run's settings")


def run_dir(args: argparse.Namespace, name: str) -> Path:
    """Where a training run goes: --resume's folder, --out, or ``runs/NAME`` (``name`` a
    plain folder name, not a path)."""
    out: Path | None = getattr(args, "resume", None) or getattr(args, "out", None)
    if out is not None:
        return out
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name:
        raise ValueError(
            f"name {name!r}: the run's folder under runs/ needs a plain name (no '/'); "
            "give --out DIR to put it elsewhere"
        )
    return Path("runs") / name


def best_line(metric: str, result: Mapping[str, Any], spec: str) -> str:
    """The closing line of a training run: its best dev score, or that it has none."""
    if result["best_epoch"] < 1:  # stopped (strict health, a signal) before any evaluation
        return f"best dev {metric}: none (no dev evaluation finished)"
    where = f"epoch {result['best_epoch']}"
    if result.get("best_partial"):  # a budget stopped that epoch there; it is scored again
        where += f", part-way: step {result['best_step']}"
    return f"best dev {metric}: {result['best_dev']:{spec}} ({where})"


JSON_OUT: list[Any] = []
"""The real standard output while ``json_alone`` sends all else to stderr (a stack of one)."""


@contextlib.contextmanager
def json_alone(on: bool) -> Iterator[None]:
    """With ``on`` (a command's ``--json``), standard output carries the JSON object alone, for
    ``| jq`` or ``json.load``: what the command says besides (epoch lines, notes, tables) goes
    to stderr meanwhile, and ``emit_json`` writes to the real standard output."""
    if not on:
        yield
        return
    JSON_OUT.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        JSON_OUT.pop()


def emit_json(payload: dict[str, Any]) -> None:
    """The command's output under ``--json``: one machine-readable JSON object, alone on
    standard output (``json_alone``). A score that is not a finite number (no best epoch yet:
    -inf) is null, which JSON has; NaN and Infinity it has not, and strict readers refuse them."""
    out = JSON_OUT[-1] if JSON_OUT else sys.stdout
    print(json.dumps(finite(payload), sort_keys=True, allow_nan=False), file=out)


def json_line(result: dict[str, Any], ascii: bool = False) -> str:
    """One result of a stream (``predict --json``, ``--output``) as strict JSON: a score that
    is not a finite number (a model whose weights went NaN) is null, as in ``emit_json``.
    ``ascii``: other characters as ``\\uXXXX`` escapes, for an output that cannot hold them
    (``unicode_stdout``)."""
    return json.dumps(finite(result), ensure_ascii=ascii, allow_nan=False)


def unicode_stdout() -> bool:
    """Whether standard output's encoding holds every character (UTF-8 and the other UTFs);
    under PYTHONIOENCODING=ascii, say, it does not."""
    try:
        return codecs.lookup(getattr(sys.stdout, "encoding", None) or "utf-8").name[:3] == "utf"
    except LookupError:
        return False


def escape_unencodable() -> None:
    """Standard output in an encoding that cannot hold every character (PYTHONIOENCODING=ascii)
    writes those it cannot as backslash escapes (``caf\\xe9``), as standard error does,
    rather than stopping part-way with a UnicodeEncodeError at a treebank word or an answer."""
    if not unicode_stdout() and getattr(sys.stdout, "errors", None) == "strict":
        with contextlib.suppress(AttributeError, ValueError):  # not a TextIOWrapper, closed
            sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (at any depth) replaced by None."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, float | int):
        return value if math.isfinite(value) else None
    try:
        return finite(float(value))  # numpy and torch scalars
    except (TypeError, ValueError):
        return value


def format_metrics(metrics: dict[str, Any]) -> str:
    return "\n".join(
        f"  {k:<18} {v:.4f}" if isinstance(v, float) else f"  {k:<18} {v}"
        for k, v in metrics.items()
    )


def join_flags(flags: Sequence[str]) -> str:
    """``--a``, ``--a and --b``, ``--a, --b and --c``."""
    return " and ".join([", ".join(flags[:-1]), flags[-1]] if len(flags) > 1 else flags)


def refuse_unused(flags: Mapping[str, Any], why: str) -> None:
    """A ValueError naming the flags of ``flags`` (flag -> value) that were given: they would
    do nothing, ``why``."""
    given = [flag for flag, v in flags.items() if v is not None and v is not False and v != []]
    if given:
        verb = "does" if len(given) == 1 else "do"
        raise ValueError(f"{join_flags(given)} {verb} nothing {why}")


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


def report_run(
    args: argparse.Namespace, out: Path, result: dict[str, Any], metric: str, spec: str
) -> int:
    """A finished training run's run directory and best dev ``metric`` (formatted by
    ``spec``), its summary with --json, and its exit code. Under torchrun process 0 reports;
    the others exit as it does."""
    from treeqa.train.distributed import World

    if not World.from_env().main:
        return STRICT_STOP if result["aborted"] else 0
    print(f"run directory: {out}\n{best_line(metric, result, spec)}")
    if args.json:
        emit_json({"run_dir": str(out), **result})
    return exit_code(result, out)


@contextlib.contextmanager
def summary_if_interrupted(args: argparse.Namespace, out: Path) -> Iterator[None]:
    """A training run a signal stopped (``loop.Interrupted``, once it had saved itself) still
    gives its summary with --json, "interrupted" naming the signal, as ``report_run`` gives a
    finished run's; the exception goes on, for ``main`` to say on stderr where the run stopped
    and exit with 128 + the signal. Under torchrun process 0 reports."""
    from treeqa.train.distributed import World
    from treeqa.train.loop import Interrupted

    try:
        yield
    except Interrupted as stop:
        if args.json and World.from_env().main:
            emit_json({"run_dir": str(out), **stop.summary})
        raise


BREAKS = re.compile(r"[\t\n\v\f\r\x1c-\x1e\x85\u2028\u2029]+")
"""Tabs and what ``str.splitlines`` breaks lines at."""


def one_line(text: str) -> str:
    """``text`` with each run of tabs and line breaks as one space, for a printed line: an
    answer or a tree's words that span them stay on their line (``cut -f1`` finds a QA answer
    before its tab). --json keeps the exact text."""
    return BREAKS.sub(" ", text)


STDIN = Path("-")
"""``--input -``: read standard input."""


def reader_gone() -> int:
    """After a BrokenPipeError on stdout (``treeqa predict ... | head``): stop quietly, as a
    pipe's writer does, with the shell's status for SIGPIPE. Python would report the broken
    pipe again when it flushes stdout at exit, so stdout now goes nowhere."""
    with contextlib.suppress(OSError, ValueError):  # a stdout without a file (captured)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


@contextlib.contextmanager
def output_file(path: Path | None) -> Iterator[IO[str] | None]:
    """``--output path`` to write results into, as they come: a temporary file beside it,
    renamed over it when the block ends, so that a full disk or Ctrl-C part-way leaves the file
    that was there as it was, and a write that fails names the file. A ValueError (an input
    refused part-way) renames it too: its results before the error are kept, as the error
    says. A path that is not a plain file (/dev/null, a pipe) is written directly."""
    if path is None:
        yield None
        return
    real = path.resolve()  # a link stays a link: the file it points to is replaced
    if real.exists() and not real.is_file():
        with real.open("w", encoding="utf-8") as out:
            yield out
        return
    from treeqa.train.checkpoint import PARTIAL, write_failed

    tmp = real.with_name(f".{real.name}.{os.getpid()}{PARTIAL}")
    refused: ValueError | None = None
    try:
        with tmp.open("w", encoding="utf-8") as out:
            try:
                yield out
            except ValueError as err:
                refused = err
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, real)
    except OSError as err:
        if err.filename not in (None, str(tmp)):  # not the output's: the system named it
            raise
        raise write_failed(path, err) from err
    finally:
        tmp.unlink(missing_ok=True)
    if refused is not None:
        raise refused


def check_output(args: argparse.Namespace) -> None:
    """Answers are written as they come, so an --output that is the --input file would be cut
    to the answers made before an error: refused, as are the model's and the data's own files
    (``check_written``)."""
    check_written(args.output, "--output", args.input, getattr(args, "checkpoint", None))


def check_written(
    path: Path | None,
    flag: str,
    given: Path | None = None,
    checkpoint: Path | None = None,
    prepared: Path | None = None,
) -> None:
    """Refuse, before any work, a file to write (``flag``'s ``path``) that is a directory, the
    input file ``given``, a checkpoint of the model or a file of its run directory by a run
    file's name (config, metrics, health report, even before it exists), or a file in the
    ``prepared`` data directory. Links are followed: writing goes where they point."""
    if path is None:
        return
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file name")
    elsewhere = "write the results elsewhere"
    real = path.resolve()  # a symlink's target, which open("w") would write over
    if given is not None and given != STDIN and real == given.resolve():
        raise ValueError(f"{flag} {path} is the --input file; {elsewhere}")
    if checkpoint is not None and checkpoint.exists():
        from treeqa.train.checkpoint import is_run_file

        run_dir = (checkpoint if checkpoint.is_dir() else checkpoint.parent).resolve()
        if checkpoint.is_file() and real == checkpoint.resolve():
            raise ValueError(f"{flag} {path} is a checkpoint of the model; {elsewhere}")
        if real.parent == run_dir and is_run_file(real.name):
            what = "a checkpoint of the model" if real.suffix == ".safetensors" else "a file"
            raise ValueError(f"{flag} {path} is {what} of the run {run_dir}; {elsewhere}")
    if prepared is not None and real.is_relative_to(prepared.resolve()):
        raise ValueError(f"{flag} {path} is a file of the prepared data {prepared}; {elsewhere}")
