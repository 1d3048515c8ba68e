"""Run a command in this process as python would: what it names (a script or ``-m`` module,
with ``-W``/``-X`` options), its ``__main__``, ``sys.argv`` and ``sys.path``, its exit code and a
traceback of its own frames."""

from __future__ import annotations

import builtins
import contextlib
import faulthandler
import functools
import importlib.machinery
import importlib.util
import io
import os
import runpy
import signal
import sys
import tempfile
import traceback
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast

from treeqa.health import report
from treeqa.health.monitor import HealthError
from treeqa.health.processes import LAUNCHERS


@dataclass
class Target:
    """What ``python [OPTIONS] SCRIPT.py ARGS`` or ``python -m MODULE ARGS`` runs."""

    kind: str  # "path" | "module"
    name: str
    argv: list[str]
    options: list[tuple[str, str]] = field(default_factory=list)  # ("-W", "ignore"), ("-X", ...)
    optimize: int = 0  # python -O (1) or -OO (2): asserts and __debug__ blocks left out
    letters: str = ""  # the other one-letter options: "IE" for python -I -E
    command: list[str] = field(default_factory=list)  # as given: the script's sys.orig_argv

    def interpreter_flags(self) -> list[str]:
        """The options that set how the interpreter runs (``-O``, ``-I``, ``-X dev`` ...)
        which this one lacks: the script runs in this process, so it must start with them."""
        needed = ["-" + "O" * self.optimize] if self.optimize > sys.flags.optimize else []
        for letter, flag in INTERPRETER_LETTERS.items():
            if letter in self.letters and not getattr(sys.flags, flag):
                needed.append("-" + letter)
        for option, value in self.options:
            key = value.partition("=")[0]
            if option == "-X" and key != "faulthandler" and key not in sys._xoptions:
                needed += ["-X", value]
        return needed


VALUE_OPTIONS = ("-W", "-X")
"""Interpreter options that take a value: ``-W ignore`` must not take ``ignore`` for the script."""
INTERPRETER_LETTERS = {
    "I": "isolated",
    "E": "ignore_environment",
    "s": "no_user_site",
    "P": "safe_path",
    "b": "bytes_warning",
    "B": "dont_write_bytecode",
}
"""One-letter options that set how the interpreter runs, with their ``sys.flags`` name (not
``-S``: without the site packages, treeqa itself would not import)."""


def parse(command: Sequence[str]) -> Target:
    """The run ``command`` asks for: ``python [OPTIONS] script.py args``, ``script.py args`` or
    ``python [OPTIONS] -m module args``."""
    args, given = list(command), list(command)
    options: list[tuple[str, str]] = []
    optimize, letters = 0, ""
    if args and Path(args[0]).name.startswith("python"):
        args = args[1:]
        while args and args[0].startswith("-") and args[0] != "-m":
            flag = args.pop(0)
            if flag == "-c":
                raise ValueError("python -c is not supported: give a script or -m module")
            if flag[:2] in VALUE_OPTIONS:
                value = flag[2:] or (args.pop(0) if args else "")
                options.append((flag[:2], value))
            elif not flag.startswith("--"):  # -O, -OO, -uO: -O changes what runs
                optimize += flag.count("O")
                letters += flag[1:].replace("O", "")
    if not args:
        raise ValueError("no script given: treeqa doctor -- python SCRIPT.py [ARGS]")
    if args[0] == "-m":
        if len(args) < 2:
            raise ValueError("-m needs a module name")
        return Target("module", args[1], args[1:], options, min(optimize, 2), letters, given)
    return Target("path", args[0], args, options, min(optimize, 2), letters, given)


def check_interpreter(target: Target) -> None:
    """The script runs in this interpreter: a ``python -O`` (``-I``, ``-X dev`` ...) run needs
    it started with those options (``treeqa doctor`` starts itself again with them)."""
    flags = " ".join(target.interpreter_flags())
    if flags:
        raise ValueError(
            f"python {flags}: the script runs inside treeqa's own interpreter, which runs "
            f"without them; start it with them: python {flags} -m treeqa doctor -- ..."
        )


def module_file(module: str) -> str | None:
    """The file ``python -m module`` would run (the working directory first, as there), or None."""
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:  # a package
            spec = importlib.util.find_spec(module + ".__main__")
    except ImportError:  # a missing parent package
        return None
    finally:
        sys.path.pop(0)
    return None if spec is None else (spec.origin or "")


STARTUP_FILTERS = {
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, None),
    ("ignore", PendingDeprecationWarning, None),
    ("ignore", ImportWarning, None),
    ("ignore", ResourceWarning, None),
}
"""(action, category, module) of the filters python starts with, below its ``-W`` ones."""


def _startup_filter(f: tuple[Any, ...]) -> bool:
    action, message, category, module, line = f
    return message is None and not line and (action, category, module) in STARTUP_FILTERS


def add_option_filters(values: Sequence[str]) -> None:
    """``-W`` filters where python puts them: above its start-up filters, below those that
    imports added since (torch's own, imported before the script here), the last given first;
    ``sys.warnoptions`` lists them, as a script that checks it expects."""
    filters = cast(list[Any], warnings.filters)  # python's own list, changed in place
    at = len(filters)
    while at and _startup_filter(filters[at - 1]):
        at -= 1
    imported = filters[:at]
    del filters[:at]
    for value in values:
        try:
            warnings._setoption(value)  # type: ignore[attr-defined]  # parses -W as python does
        except Exception as e:  # python too warns and runs on
            print(f"Invalid -W option ignored: {e}", file=sys.stderr)
    filters[:0] = imported
    warnings._filters_mutated()  # type: ignore[attr-defined]
    sys.warnoptions[:] = values


@contextlib.contextmanager
def interpreter_options(options: list[tuple[str, str]]) -> Iterator[None]:
    """Apply ``-W`` warning filters and ``-X faulthandler`` for the run, as python would."""
    faults, warnoptions = faulthandler.is_enabled(), sys.warnoptions[:]
    with warnings.catch_warnings():
        add_option_filters([value for flag, value in options if flag == "-W"])
        if ("-X", "faulthandler") in options:
            with contextlib.suppress(ValueError, OSError):  # stderr without a file descriptor
                faulthandler.enable()
        try:
            yield
        finally:
            sys.warnoptions[:] = warnoptions
            if not faults:
                faulthandler.disable()


real_signal, real_getsignal = signal.signal, signal.getsignal
"""``signal.signal`` and ``signal.getsignal`` themselves: the doctor's own code sees its handlers."""

DOCTORS: set[Callable[..., Any]] = set()
"""The functions of the doctor's SIGTERM handlers (``stop``; a child process's, ``forks``)."""


def _shown(handler: Any) -> Any:
    """What the script is told a handler is: the doctor's reads as ``SIG_DFL``, which it stands
    in for."""
    return signal.SIG_DFL if getattr(handler, "__func__", handler) in DOCTORS else handler


@contextlib.contextmanager
def _doctors_handler_unseen() -> Iterator[None]:
    """While the doctor's SIGTERM handler stands in for the default, the script sees the
    default: ``signal.getsignal`` and ``signal.signal``'s return value give ``SIG_DFL`` for it.
    Code that chains to the handler it found when it has one, as Lightning's does (its own,
    then the one before, unless that was ``SIG_DFL``), would otherwise call the doctor's, which
    ends the script at once where plain python goes on to stop gracefully. The default put
    back (a handler's previous one restored) puts the doctor's back, so the run still reports."""
    installer = os.getpid()

    def getsignal(signalnum: Any) -> Any:
        return _shown(real_getsignal(signalnum))

    def set_signal(signalnum: Any, handler: Any) -> Any:
        if signalnum == signal.SIGTERM and os.getpid() == installer:
            if not callable(handler) and handler == signal.SIG_DFL:
                handler = stop
        return _shown(real_signal(signalnum, handler))

    wrappers: tuple[tuple[str, Callable[..., Any], Callable[..., Any]], ...] = (
        ("getsignal", real_getsignal, getsignal),
        ("signal", real_signal, set_signal),
    )
    for name, original, wrapper in wrappers:
        setattr(signal, name, functools.wraps(original)(wrapper))
    try:
        yield
    finally:
        signal.signal, signal.getsignal = real_signal, real_getsignal


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """SIGTERM ends the script as ``sys.exit(143)`` would, so that its process still reports:
    a scheduler preempting the job sends it, and torchrun and ``spawn`` send it to the other
    processes when one fails. A handler the script installs replaces this one; to the script
    this one reads as the default (``_doctors_handler_unseen``)."""
    if real_getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    global stopping
    real_signal(signal.SIGTERM, stop)
    try:
        with _doctors_handler_unseen():
            yield
    finally:
        real_signal(signal.SIGTERM, signal.SIG_DFL)
        stopping = None


def stop(signum: int, frame: Any) -> None:
    """``exit_on_sigterm``'s handler."""
    global stopping
    stopping = 128 + signum
    raise SystemExit(stopping)


DOCTORS.add(stop)

stopping: int | None = None
"""The exit code SIGTERM asked for. The handler raises it where the signal lands: should that
be a callback whose errors Python only prints (a weakref's, a ``__del__``), the script went on,
and the doctor's next backward raises it again."""


@contextlib.contextmanager
def before_os_exit(callback: Callable[[], object]) -> Iterator[None]:
    """Call ``callback`` (the report) when the script ends the process with ``os._exit``, which
    skips every ``finally``; a child forked from it (a DataLoader worker) exits untouched."""
    real, pid = os._exit, os.getpid()

    def exit_now(status: int) -> NoReturn:
        try:
            if os.getpid() == pid:
                os._exit = real
                callback()
        finally:
            real(status)

    os._exit = exit_now
    try:
        yield
    finally:
        os._exit = real


def writable(flag: str, path: Path) -> None:
    """Fail before the run, not after it, when a report cannot be written there."""
    if path.is_dir():
        raise ValueError(f"{flag} {path}: a directory; give a file name")
    if path.exists() and report.in_place(path):  # /dev/stdout, a pipe: written into, not beside
        if not os.access(path, os.W_OK):
            raise ValueError(f"{flag} {path}: cannot write there (permission denied)")
        return
    try:  # the report's directory is made as writing it would, only sooner
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot write there ({e.strerror})") from None
    try:  # a file made there and dropped: as root, os.access says yes to /proc and /sys
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot write there ({e.strerror})") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{flag} {path}: cannot write there (the file is read-only)")


def run_path(path: Path) -> None:
    """Run ``path`` as ``python path`` does: as ``__main__`` with an absolute ``__file__`` and
    ``sys.argv[0]`` as given (``runpy.run_path`` would make both the path passed to it)."""
    with io.open_code(str(path)) as f:
        code = compile(f.read(), str(path), "exec")
    main = types.ModuleType("__main__")
    loader = importlib.machinery.SourceFileLoader("__main__", str(path))
    main.__dict__.update(
        __file__=str(path), __cached__=None, __loader__=loader, __builtins__=builtins
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _ours(tb: types.TracebackType) -> bool:
    name = tb.tb_frame.f_code.co_filename
    return name.startswith(str(Path(__file__).parent)) or "runpy" in name


def _without_ours(error: BaseException) -> None:
    """Drop runpy's frames and the doctor's (this module's, and its wrappers' around torch and
    the warnings module, which an error raised inside them passes through) from ``error``'s
    traceback. Ctrl-C lands wherever the script was, often in the doctor's own hooks: its
    traceback ends at the frame that called into them, as if they were not there."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    if isinstance(error, KeyboardInterrupt):
        start = next((i for i, f in enumerate(frames) if not _ours(f)), len(frames))
        end = next((i for i in range(start, len(frames)) if _ours(frames[i])), len(frames))
        frames = frames[start:end]
    kept = [f for f in frames if not _ours(f)]
    for before, after in zip(kept, kept[1:], strict=False):
        before.tb_next = after
    if kept:
        kept[-1].tb_next = None
    error.__traceback__ = kept[0] if kept else None


def print_traceback(error: BaseException) -> None:
    """The traceback as python prints it: the script's frames, without runpy's or ours (in
    the exceptions it chains too)."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        chained = stack.pop()
        if chained is not None and id(chained) not in seen:
            seen.add(id(chained))
            _without_ours(chained)
            stack += [chained.__cause__, chained.__context__]
    hook = sys.excepthook  # a script's own (rich's, loguru's) prints it, as under python
    if hook is sys.__excepthook__:
        traceback.print_exception(type(error), error, error.__traceback__)
        return
    try:
        hook(type(error), error, error.__traceback__)
    except Exception as failed:  # as python says it
        print("Error in sys.excepthook:", file=sys.stderr)
        traceback.print_exception(type(failed), failed, failed.__traceback__)
        print("\nOriginal exception was:", file=sys.stderr)
        traceback.print_exception(type(error), error, error.__traceback__)


def source(target: Target) -> str:
    """The file ``target`` runs ("" for a module without one); an error when there is none."""
    if target.kind == "path":
        if not main_file(target).is_file():
            if target.command[:1] == [target.name]:  # not after python: a launcher, it may be
                raise FileNotFoundError(
                    f"{target.name}: no such script, nor a launcher the doctor runs "
                    f"({LAUNCHERS}): treeqa doctor -- python SCRIPT.py [ARGS] for one "
                    "process, or -- torchrun [OPTIONS] SCRIPT.py [ARGS] for several"
                )
            raise FileNotFoundError(
                f"{target.name}: no such script (treeqa doctor -- python SCRIPT.py)"
            )
        return str(main_file(target).resolve())
    source = module_file(target.name)
    if source is None:
        raise ValueError(f"-m {target.name}: no such module here or on the Python path")
    return source


def main_file(target: Target) -> Path:
    """The file ``python PATH`` runs: PATH, or a folder's ``__main__.py``."""
    path = Path(target.name)
    return path / "__main__.py" if path.is_dir() else path


def run(target: Target) -> int:
    """Run ``target`` in this process as python would; its exit code (3 when the monitor's
    strict mode stopped it, 130 on Ctrl-C). ``sys.argv``, ``sys.path`` and ``__mp_main__`` are
    the script's while it runs and ours again after."""
    saved_argv, saved_path, saved_orig = sys.argv[:], sys.path[:], sys.orig_argv
    # multiprocessing's first import aliases __mp_main__ to the running __main__ (the script's
    # namespace here); restored below so that namespace does not outlive the run in-process.
    saved_mp_main = sys.modules.get("__mp_main__")
    sys.argv, sys.orig_argv = target.argv, target.command or saved_orig
    if target.kind == "path":
        sys.path.insert(0, str(main_file(target).resolve().parent))
    else:
        sys.path.insert(0, os.getcwd())
    try:
        with interpreter_options(target.options):
            if target.kind == "path":
                run_path(main_file(target).absolute())
            else:
                runpy.run_module(target.name, run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except HealthError as e:
        print(f"treeqa doctor: {e}", file=sys.stderr)
        return 3
    except BaseException as e:
        print_traceback(e)
        return 130 if isinstance(e, KeyboardInterrupt) else 1  # as python exits on Ctrl-C
    finally:
        sys.argv, sys.path[:], sys.orig_argv = saved_argv, saved_path, saved_orig
        if saved_mp_main is not None:
            sys.modules["__mp_main__"] = saved_mp_main
        else:
            sys.modules.pop("__mp_main__", None)
        if not sys.stdout.closed:  # (a script may close it: python ends quietly then)
            sys.stdout.flush()
