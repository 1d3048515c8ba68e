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
given no doctor at all).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.process
import os
import signal
import sys
import tempfile
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from treeqa.health.monitor import HealthError
from treeqa.health.processes import Watched

FRESH = ("spawn", "forkserver")
"""Start methods that run the process in a fresh interpreter, which needs a doctor of its own."""
LOADER_WORKERS = "torch.utils.data._utils.worker"
"""The module of a DataLoader worker's target: it trains nothing."""


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

    def starting(self, process: Any) -> None:
        """``process.start()`` is called: one started in a fresh interpreter is handed a doctor
        (not a DataLoader's worker, nor one that ``torch.multiprocessing.spawn`` watches)."""
        target = getattr(process, "_target", None)
        if (
            start_method(process) not in FRESH
            or getattr(target, "__module__", "") == LOADER_WORKERS
        ):
            return
        if any(isinstance(arg, Watched) for arg in getattr(process, "_args", ())):
            return
        process._treeqa_doctor = Spawned(self.folder, self.every, self.mode, list(self.sources))

    def started(self, process: Any) -> None:
        """``process.start()`` ran: a watched one is named if a signal ends it (``say_killed``)."""
        spawned = vars(process).pop("_treeqa_doctor", None) is not None
        if spawned or getattr(getattr(process, "_popen", None), "method", "") == "fork":
            self.children.add(process)

    def say_killed(self, stream: Any) -> None:
        """Name the child processes a signal ended before they could report (SIGKILL, say: the
        kernel's out-of-memory killer sends it): what they trained is not in the report."""
        killed = sorted((p.pid, -p.exitcode) for p in list(self.children) if (p.exitcode or 0) < 0)
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

    def reported(self) -> bool:
        return self.folder.is_dir() and any(self.folder.glob("rank*.json"))

    def hold_sigterm(self) -> None:
        """A forked process whose ``run()`` is over: a SIGTERM now (a Pool's terminate()
        signals workers that may be ending on their own) waits for its report."""
        self.previous = signal.signal(signal.SIGTERM, lambda signum, _: self.held.append(signum))

    def release_sigterm(self) -> None:
        """The report is written: SIGTERM does again what it did, and one held is sent again."""
        if self.previous is None:
            return
        signal.signal(signal.SIGTERM, self.previous)
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
        finally:
            forks.hold_sigterm()

    return run_watched


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
    it (elsewhere nothing: this leaves None where the ``Spawned`` was)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
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
