"""The processes ``multiprocessing`` starts from a watched script: Hogwild training
(``mp.Process(target=train, args=(model,))``, as PyTorch's ``mnist_hogwild`` example does), a
``Pool``'s or a ``ProcessPoolExecutor``'s workers.

A forked process carries on under its copy of the script's doctor, which multiprocessing readies
as the process starts (``Doctor._forked``, an after-fork callback). A process started by
``spawn`` or ``forkserver`` (a fresh interpreter: CUDA needs it, and it is Python 3.14's
default) is handed a ``Spawned`` with its target: unpickled there before the process runs, it
puts a doctor in that multiprocessing then readies in the same way. Either way the process, if
it took optimiser steps, writes its report to ``Forks.folder`` as it exits, and the script's end
merges them. A DataLoader's workers take no steps and write nothing (those a loader spawns are
given no doctor at all, nor is a ``Manager``'s server).

A child is judged by what it does, since nothing tells a training process from a producer of
data beforehand: until its first optimiser step it keeps quiet and SIGTERM ends it as it would
without the doctor; from then on it has trained, and a SIGTERM ends it through Python so that it
reports. The first child to step prints its findings as they come.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.process
import multiprocessing.util
import os
import signal
import sys
import tempfile
import traceback
import types
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from treeqa.health import processes, script
from treeqa.health.monitor import HealthError
from treeqa.health.processes import WATCHED, Watched

FRESH = ("spawn", "forkserver")
"""Start methods that run the process in a fresh interpreter, which needs a doctor of its own."""
UNWATCHED = ("torch.utils.data._utils.worker", "multiprocessing.managers")
"""The modules of targets that train nothing: a DataLoader's worker, a ``Manager``'s server."""


def trains_nothing(process: Any) -> bool:
    """Whether ``process``'s target is one of ``UNWATCHED``."""
    return getattr(getattr(process, "_target", None), "__module__", "") in UNWATCHED


def start_method(process: Any) -> str:
    """How ``process`` will be started: its context's method, else the default one."""
    return process._start_method or multiprocessing.get_start_method()


class Forks:
    """The processes ``multiprocessing`` starts from a watched script: each runs under a doctor
    (a fork's copy of the script's, or one a ``Spawned`` put in), and one that trained writes
    its report to ``folder`` as it exits, for the script's end to merge."""

    def __init__(self, every: int = 50, mode: str = "on", sources: Sequence[str] = ()) -> None:
        # Named now, made by the first process to report: most scripts start none.
        self.folder = Path(tempfile.gettempdir()) / f"treeqa-doctor-forks-{os.getpid()}-{id(self)}"
        self.every, self.mode, self.sources = every, mode, sources  # a spawned doctor's
        self.steps_before = -1  # in a forked process: the steps its parent had taken
        self.children: weakref.WeakSet[Any] = weakref.WeakSet()  # the processes it watches
        self.previous: Any = None  # SIGTERM's handler while one is held (hold_sigterm)
        self.readied: int | None = None  # the pid of the process its doctor was readied in
        self.held: list[int] = []
        self.exiting = contextlib.ExitStack()  # in a child: os._exit reports first
        self.stepped = True  # in a child: False until its first optimiser step
        self.stream: Any = None  # in a child: where its findings go, should it print them

    def starting(self, process: Any) -> None:
        """``process.start()`` is called: one started in a fresh interpreter is handed a doctor
        (not one whose target trains nothing, nor one ``torch.multiprocessing.spawn`` watches:
        that one is marked, for ``processes.end_spawned``)."""
        if any(isinstance(arg, Watched) for arg in getattr(process, "_args", ())):
            setattr(process, WATCHED, True)
            return
        if trains_nothing(process):
            return
        self.folder.mkdir(exist_ok=True)  # (before the child can step)
        if start_method(process) not in FRESH:
            return
        process._treeqa_doctor = Spawned(self.folder, self.every, self.mode, list(self.sources))

    def started(self, process: Any) -> None:
        """``process.start()`` ran: a watched one is named if a signal ends it (``say_killed``)."""
        spawned = vars(process).pop("_treeqa_doctor", None) is not None
        forked = getattr(getattr(process, "_popen", None), "method", "") == "fork"
        if spawned or (forked and not trains_nothing(process)):
            self.children.add(process)

    def end_running(self) -> None:
        """The script's code is over: children still running (daemons, a Pool never closed,
        processes never joined) end as Python's exit ends them (multiprocessing's exit
        function: finalizers, then terminate the daemons and join the rest), and report."""
        if any(p.is_alive() for p in list(self.children)):
            multiprocessing.util._exit_function()  # type: ignore[attr-defined]
            # (the process goes on: its own exit runs the function again)
            multiprocessing.util._exiting = False  # type: ignore[attr-defined]

    def say_killed(self, stream: Any) -> None:
        """Name the child processes a signal ended after they trained and before they could
        report (SIGKILL, say: the kernel's out-of-memory killer sends it): what they trained is
        not in the report."""
        killed = sorted(
            (p.pid, -p.exitcode)
            for p in list(self.children)
            if (p.exitcode or 0) < 0 and self.trained(p.pid).exists()
        )
        if killed:
            said = ", ".join(f"pid {pid} by signal {sig}" for pid, sig in killed)
            print(
                f"treeqa doctor: {len(killed)} child process{'es' if len(killed) > 1 else ''} "
                f"ended before {'they' if len(killed) > 1 else 'it'} could report ({said}): "
                f"what {'they' if len(killed) > 1 else 'it'} trained is not in this report",
                file=stream,
            )

    def rank(self) -> int:
        """This child process's number: 1, 2, ... as multiprocessing counts the script's
        children (its own pid, for a child's child)."""
        identity = multiprocessing.current_process()._identity
        return identity[0] if len(identity) == 1 else os.getpid()

    def trained(self, pid: int) -> Path:
        """The file a child writes at its first step and removes once it has reported."""
        return self.folder / f"trained-{pid}"

    def reported(self) -> bool:
        return self.folder.is_dir() and any(self.folder.glob("rank*.json"))

    def ready(self, stream: Any) -> None:
        """In a child process, as it starts: quiet until its first step, and SIGTERM ending it
        as it would without the doctor (a handler of the script's stays)."""
        self.stepped, self.stream = False, stream
        if script.real_getsignal(signal.SIGTERM) is script.stop:  # the doctor's, not the script's
            script.real_signal(signal.SIGTERM, self._sigterm)

    def _sigterm(self, signum: int, frame: Any) -> None:
        if self.stepped:  # it trained: it ends through Python, and reports
            script.stop(signum, frame)
        script.real_signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def first_step(self) -> bool:
        """In a child process, its first optimiser step: it has trained (should a signal end it
        before it reports, ``say_killed`` names it). Whether it is the first child to step, and
        so prints its findings as they come."""
        self.stepped = True
        try:
            self.trained(os.getpid()).touch()
            os.close(os.open(self.folder / "live", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except OSError:  # another child prints (or the script has reported: no folder)
            return False
        return True

    def report(self, result: dict[str, Any]) -> None:
        """A child process's report, for the script's end to merge (its series too: the
        script may train nothing); none when the script has reported already."""
        if self.folder.is_dir():
            prints = processes.Fingerprints(self.rank())
            processes.write_report(self.folder, self.own(result), prints, series=True)
            self.trained(os.getpid()).unlink(missing_ok=True)

    def hold_sigterm(self) -> None:
        """A forked process whose ``run()`` is over: a SIGTERM now (a Pool's terminate()
        signals workers that may be ending on their own) waits for its report."""
        self.previous = script.real_signal(
            signal.SIGTERM, lambda signum, _: self.held.append(signum)
        )

    def release_sigterm(self) -> None:
        """The report is written: SIGTERM does again what it did without the doctor, and one
        held is sent again."""
        if self.previous is None:
            return
        doctors = self.previous is script.stop or self.previous == self._sigterm
        script.real_signal(signal.SIGTERM, signal.SIG_DFL if doctors else self.previous)
        self.previous = None
        if self.held:
            os.kill(os.getpid(), signal.SIGTERM)

    def own(self, result: dict[str, Any]) -> dict[str, Any]:
        """A forked process's report, less what its copy of the doctor held from the parent:
        the parent's steps before the fork, and the findings last made then."""
        before = self.steps_before
        findings = [f for f in result["findings"] if f["step"] > before]
        return {**result, "steps": result["steps"] - before, "findings": findings}


def forked_run(run: Any, forks: Forks) -> Any:
    """A forked process's ``run``: strict mode's stop ends it as the doctor ends a script,
    with one line and exit code 3, not multiprocessing's traceback and 1. Once it has run, a
    SIGTERM waits for its report (``Forks.hold_sigterm``)."""

    def run_watched() -> Any:
        try:
            return run()
        except HealthError as e:
            print(f"treeqa doctor: {e}", file=sys.stderr, flush=True)
            raise SystemExit(3) from None
        except SystemExit:
            raise
        except BaseException as e:  # noqa: BLE001 - said here as _bootstrap would say it
            print_as_bootstrap(e)
            raise SystemExit(1) from None  # _bootstrap's exit code for it, and nothing printed
        finally:
            forks.hold_sigterm()

    return run_watched


def print_as_bootstrap(error: BaseException) -> None:
    """``error``, raised by this process's ``run()``, printed as multiprocessing's
    ``_bootstrap`` prints it (``Process NAME:``, then the traceback from its ``self.run()``
    line), less the doctor's frames (``run_watched``, ``ready_then_run``) between the two."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    shown = traceback.TracebackException(type(error), error, tb)
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code is not _BOOTSTRAP:
        frame = frame.f_back
    if frame is not None:
        called = traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno, "_bootstrap")
        shown.stack.insert(0, called)
    sys.stderr.write(f"Process {multiprocessing.current_process().name}:\n")
    sys.stderr.write("".join(shown.format()))
    sys.stderr.flush()


_BOOTSTRAP = vars(multiprocessing.process.BaseProcess)["_bootstrap"].__code__
"""What runs a process's ``run()`` and prints what it raises."""


class Spawned:
    """What a process started in a fresh interpreter carries, pickled with it: unpickled there
    before the process runs, it puts a doctor in (``launch.watch_spawned``) that reports to
    ``folder`` as a forked process's does."""

    def __init__(self, folder: Path, every: int, mode: str, sources: list[str]) -> None:
        self.folder, self.every, self.mode, self.sources = folder, every, mode, sources

    def __reduce__(self) -> tuple[Any, ...]:
        return (start_doctor, (str(self.folder), self.every, self.mode, self.sources))


def start_doctor(folder: str, every: int, mode: str, sources: list[str]) -> None:
    """Unpickling a ``Spawned``: a doctor for this process, should multiprocessing be starting
    it and its code have imported torch (elsewhere nothing: this leaves None where the
    ``Spawned`` was). A process whose script and target import no torch trains nothing, and
    is left as fast to start as it was."""
    if getattr(multiprocessing.current_process(), "_inheriting", False) and "torch" in sys.modules:
        from treeqa.health.launch import watch_spawned  # (which imports this module)

        watch_spawned(Path(folder), every, mode, sources)


def ready_at_start(ready: Callable[[], None]) -> None:
    """Call ``ready`` as this process (a fresh interpreter multiprocessing is starting) starts
    its ``run``, where ``current_process()`` is it: a spawned process runs no after-fork
    callbacks (a forkserver's does, and ``ready`` must then do nothing the second time)."""
    process_class: Any = multiprocessing.process.BaseProcess
    original = process_class._bootstrap

    def bootstrap(process: Any, *args: Any, **kwargs: Any) -> Any:
        process_class._bootstrap = original  # (its forks start as usual)
        run = process.run

        def ready_then_run() -> Any:
            process.run = run
            ready()  # (which may wrap process.run)
            return process.run()

        process.run = ready_then_run
        return original(process, *args, **kwargs)

    process_class._bootstrap = bootstrap


script.DOCTORS.add(Forks._sigterm)  # a child's SIGTERM handler reads as the default too
