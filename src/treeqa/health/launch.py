"""How the doctor starts: on a script run in this process (``run_doctor``, what ``treeqa
doctor`` calls; a launcher's processes each under a doctor of their own), in one of several
processes that report to a launching doctor (``watch_process``), and in a process
``multiprocessing`` is starting in a fresh interpreter (``watch_spawned``)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

from treeqa.health import forks, processes, report, script, wrap
from treeqa.health.doctor import Doctor
from treeqa.health.monitor import HealthMonitor


def run_doctor(
    command: Sequence[str],
    *,
    json_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    every: int = 50,
    mode: str = "on",
    stream: Any = None,
) -> tuple[int, dict[str, Any]]:
    """Run ``command`` (``python SCRIPT.py ARGS``, ``python -m MODULE ARGS``, or either behind
    ``torchrun [OPTIONS]`` or ``accelerate launch [OPTIONS]``: every process) under the
    monitor.

    Returns the script's exit code (3 when strict mode stopped it, 130 on Ctrl-C) and the
    report. Report paths are taken relative to the working directory at the call: the script
    may change it.
    """
    launched = processes.launcher_split(command)
    target = script.parse(launched.worker if launched else command)
    if not launched:  # (the launcher starts each process with the command's own flags)
        script.check_interpreter(target)
    source = script.source(target)
    json_path = Path(json_path).absolute() if json_path is not None else None
    plot_path = Path(plot_path).absolute() if plot_path is not None else None
    for flag, path in (("--json", json_path), ("--plot", plot_path)):
        if path is not None:
            script.writable(flag, path)
    if plot_path is not None:
        report.check_plot_path(plot_path)
    if launched:  # torchrun or accelerate: each process runs a doctor of its own
        return processes.run_launcher(
            launched,
            json_path=json_path,
            plot_path=plot_path,
            every=every,
            mode=mode,
            stream=stream or sys.stderr,
        )
    folder = processes.worker_folder()
    if folder is not None:  # a launcher's process: the launching doctor sums up
        rank = processes.worker_rank()
        return watch_process(script.run, (target,), folder, rank, every, mode, stream, source)
    monitor = HealthMonitor(
        mode=mode, every=every, json_path=json_path, plot_path=plot_path, stream=stream
    )
    if source:
        monitor.source_files.append(source)
    doctor = Doctor(monitor)

    def final_report(stopped: bool | None = None) -> dict[str, Any]:
        if doctor.spawned is not None and stopped is not None:  # (not at os._exit: no waiting)
            processes.end_spawned(stop=stopped)
        children = doctor.forks
        if children is not None:
            children.end_running()  # (their reports are in the merge)
        doctor.uninstall()
        try:
            return merged_report(children)
        finally:
            if children is not None:
                children.say_killed(stream or sys.stderr)
                shutil.rmtree(children.folder, ignore_errors=True)
            if doctor.spawned is not None:
                shutil.rmtree(doctor.spawned, ignore_errors=True)

    def merged_report(children: forks.Forks | None) -> dict[str, Any]:
        started = children is not None and children.reported() and doctor.spawned is None
        if started:  # the processes it started trained: one report of them all (and the script)
            reports_to = (json_path, plot_path)
            monitor.json_path = monitor.plot_path = None
            monitor.summary = False
        result = doctor.finish()
        if doctor.spawned is not None:  # the script's own steps, if any, are not reported
            result = processes.report_merged(
                doctor.spawned, *doctor.reports_to, stream or sys.stderr
            )
        elif started:
            assert children is not None
            if result["steps"]:  # the script trained too: process 0
                processes.write_report(children.folder, result, processes.Fingerprints(0))
            result = processes.report_merged(children.folder, *reports_to, stream or sys.stderr)
        return result

    doctor.install()
    try:
        # SIGTERM (a scheduler preempting the job) ends the script as sys.exit(143) would,
        # and os._exit after training reports first: neither loses the run's report.
        with script.exit_on_sigterm(), script.before_os_exit(final_report):
            code = script.run(target)
            stopped = script.stopping is not None  # SIGTERM, said before the handler goes
    except BaseException:
        doctor.uninstall()
        raise
    code = _strict_stop(code, monitor, stream)
    result = final_report(stopped)
    if mode == "strict" and code == 0 and result.get("processes"):  # a child process's stop
        code = 3 if any(f["severity"] == "error" for f in result["findings"]) else 0
    return code, result


def _strict_stop(code: int, monitor: HealthMonitor, stream: Any) -> int:
    """The script's exit code, or 3 where strict mode asked it to stop and it ended as if
    nothing had: the stop is an exception, which a loop that catches every ``Exception`` (to
    skip a bad batch and go on) swallows, so the run went on to its end."""
    if code != 0 or not monitor.stop_requested:
        return code
    print(
        "treeqa doctor: strict mode: an error finding asked the script to stop, and it caught "
        "the HealthError and went on (see above)",
        file=stream or sys.stderr,
        flush=True,
    )
    return 3


def watch_process(
    fn: Any,
    args: tuple[Any, ...],
    folder: Path,
    rank: int,
    every: int,
    mode: str,
    stream: Any = None,
    source: str = "",
) -> tuple[Any, dict[str, Any]]:
    """``fn(*args)`` in one of several processes (torchrun's workers, those ``spawn`` started)
    under a doctor of its own: process 0 prints its findings as they come (to ``stream``), the
    others keep quiet, and each writes its report to ``folder`` for the launching doctor to
    merge. Returns what ``fn`` returned and the report."""
    quiet = rank != 0
    monitor = HealthMonitor(mode=mode, every=every, stream=io.StringIO() if quiet else stream)
    monitor.summary = False
    if source:
        monitor.source_files.append(source)
    prints = processes.Fingerprints(rank)
    doctor = Doctor(monitor, prints)
    doctor.install()
    try:
        with script.exit_on_sigterm():  # torchrun and spawn stop the others so when one fails
            value = fn(*args)
        if fn is script.run:  # (a script's exit code; spawn's function returns its own value)
            value = _strict_stop(value, monitor, stream)
    finally:
        doctor.uninstall()
        result = doctor.finish()
        processes.write_report(folder, result, prints)
    return value, result


SPAWNED: list[Any] = []
"""This process's doctor and SIGTERM handler, when multiprocessing started it in a fresh
interpreter from a watched script (kept: multiprocessing holds after-fork callbacks weakly)."""


def watch_spawned(folder: Path, every: int, mode: str, sources: Sequence[str]) -> None:
    """In a process multiprocessing is starting in a fresh interpreter (``spawn``,
    ``forkserver``) from a watched script, before it runs: a doctor as the script's, which
    multiprocessing readies as it readies a forked process's copy (``Doctor._forked``), and
    SIGTERM ending it as ``sys.exit(143)`` would, as in the script."""
    if SPAWNED:
        return
    monitor = HealthMonitor(mode=mode, every=every)
    monitor.source_files.extend(sources)
    doctor = Doctor(monitor)
    doctor.install()
    assert doctor.forks is not None
    doctor.forks.folder = folder
    forks.ready_at_start(doctor._forked)
    for namespace in script_globals(sources):  # imported before this doctor was
        wrap.rebind(namespace)
    sigterm = contextlib.ExitStack()
    sigterm.enter_context(script.exit_on_sigterm())
    SPAWNED.extend([doctor, sigterm])


def script_globals(sources: Sequence[str]) -> list[dict[str, Any]]:
    """The globals of the script's modules in a process multiprocessing started: the script
    itself as ``__mp_main__`` (whose functions hold the namespace ``runpy`` ran it in, a copy
    of the module's), and the modules imported from its folder (not from Python's or the
    installed packages' folders, nor treeqa's)."""
    folders = tuple(str(Path(source).parent) + os.sep for source in sources)
    installed = {sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib")}
    installed_folders = tuple(path + os.sep for path in installed if path)
    found: dict[int, dict[str, Any]] = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if name == "__mp_main__" or (
            file.startswith(folders)
            and not file.startswith(installed_folders)
            and not name.startswith("treeqa.")
        ):
            for namespace in (vars(module), *own_function_globals(module)):
                found[id(namespace)] = namespace
    return list(found.values())


def own_function_globals(module: ModuleType) -> list[dict[str, Any]]:
    """The globals of the functions defined in ``module``."""
    return [
        f.__globals__
        for f in vars(module).values()
        if isinstance(f, FunctionType) and f.__module__ == module.__name__
    ]
