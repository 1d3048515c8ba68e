"""Run any PyTorch training script under the health monitor, without the script importing treeqa.

Step boundaries come from global hooks installed before the script starts: a step begins at
the first module forward after the previous optimiser step (the gap before it is data time)
and ends at ``Optimizer.step`` (a global optimiser post-hook). ``torch.autograd.backward``
(which ``Tensor.backward`` calls) is wrapped to see the loss and ``retain_graph``. The script
runs through ``runpy`` as ``__main__`` with its own ``sys.argv``; its output, files and exit
code are its own, and the monitor writes only to stderr and the report paths.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import time
import traceback
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from treeqa.health.monitor import HealthError, HealthMonitor


class Doctor:
    """Global hooks that drive a ``HealthMonitor`` from an unmodified training script."""

    def __init__(self, monitor: HealthMonitor):
        self.monitor = monitor
        self.clock: torch.optim.Optimizer | None = None
        self.called: dict[int, nn.Module] = {}
        self.roots: list[nn.Module] = []
        self.open = False
        self.loss: torch.Tensor | None = None
        self.last_end = time.perf_counter()
        self.compute_start = self.last_end
        self.handles: list[Any] = []
        self.original_backward: Any = None

    def install(self) -> None:
        hooks = torch.nn.modules.module
        self.handles.append(hooks.register_module_forward_pre_hook(self._discover))
        self.handles.append(register_optimizer_step_post_hook(self._step_end))
        self.original_backward = torch.autograd.backward
        original = self.original_backward
        # torch caches functions it finds in its namespace; a weak reference keeps such a cache
        # from holding this doctor, its monitor and the script's models after the run.
        doctor = weakref.ref(self)

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            me = doctor()
            if me is not None:
                loss = tensors if isinstance(tensors, torch.Tensor) else next(iter(tensors), None)
                retain = kwargs.get("retain_graph", args[1] if len(args) > 1 else None)
                create = kwargs.get("create_graph", args[2] if len(args) > 2 else False)
                if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
                    me.loss = loss
                me.monitor.note_backward(bool(create if retain is None else retain))
            return original(tensors, *args, **kwargs)

        torch.autograd.backward = backward
        self.monitor.install_loss_checks()

    def uninstall(self) -> None:
        while self.handles:
            self.handles.pop().remove()
        if self.original_backward is not None:
            torch.autograd.backward = self.original_backward
            self.original_backward = None
        self.monitor.uninstall()

    def _begin(self) -> None:
        if not self.open:
            self.open = True
            self.compute_start = time.perf_counter()
            self.monitor.begin_step()

    def _discover(self, module: nn.Module, args: Any) -> None:
        # Until the first optimiser step every module call is seen, to find the models trained.
        self.called.setdefault(id(module), module)
        self._begin()

    def _root_pre_hook(self, module: nn.Module, args: Any) -> None:
        self._begin()

    def _find_roots(self, optimizer: torch.optim.Optimizer) -> None:
        trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
        inner = {id(c) for m in self.called.values() for c in m.modules() if c is not m}
        self.roots = [
            m
            for i, m in self.called.items()
            if i not in inner and any(id(p) in trained for p in m.parameters())
        ]
        self.handles.pop(0).remove()  # the every-module discovery hook: no cost from now on
        for root in self.roots:
            self.handles.append(root.register_forward_pre_hook(self._root_pre_hook))
        self.monitor.watch(*self.roots)
        self.called.clear()

    def _step_end(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.clock is None:
            self.clock = optimizer
            self._find_roots(optimizer)
        if optimizer is not self.clock:
            return
        now = time.perf_counter()
        if not self.open:  # no module forward seen this step (functional model)
            self.compute_start = self.last_end
        loss, self.loss = self.loss, None
        self.monitor.end_step(loss, now - self.compute_start, self.compute_start - self.last_end)
        self.open = False
        self.last_end = time.perf_counter()
        if self.monitor.stop_requested:
            raise HealthError("strict mode: stopping on an error finding (see above)")


def _target(command: Sequence[str]) -> tuple[str, str, list[str]]:
    """("path" | "module", target, argv) from ``python script.py args`` or ``script.py args``."""
    args = list(command)
    if args and Path(args[0]).name.startswith("python"):
        args = args[1:]
        while args and args[0].startswith("-") and args[0] not in ("-m",):
            args = args[1:]  # interpreter flags such as -u do not change what runs
    if not args:
        raise ValueError("no script given: treeqa doctor -- python SCRIPT.py [ARGS]")
    if args[0] == "-m":
        if len(args) < 2:
            raise ValueError("-m needs a module name")
        return "module", args[1], args[1:]
    return "path", args[0], args


def _importable(module: str) -> bool:
    """Whether ``python -m module`` would find it (the working directory first, as there)."""
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a missing parent package
        return False
    finally:
        sys.path.pop(0)


def run_doctor(
    command: Sequence[str],
    *,
    json_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    every: int = 50,
    mode: str = "on",
    stream: Any = None,
) -> tuple[int, dict[str, Any]]:
    """Run ``command`` (``python SCRIPT.py ARGS`` or ``python -m MODULE ARGS``) under the monitor.

    Returns the script's exit code (3 when strict mode stopped it) and the report.
    """
    kind, target, argv = _target(command)
    if kind == "path" and not Path(target).is_file():
        raise FileNotFoundError(f"{target}: no such script (treeqa doctor -- python SCRIPT.py)")
    if kind == "module" and not _importable(target):
        raise ValueError(f"-m {target}: no such module here or on the Python path")
    monitor = HealthMonitor(
        mode=mode, every=every, json_path=json_path, plot_path=plot_path, stream=stream
    )
    if kind == "path":
        monitor.source_files.append(str(Path(target).resolve()))
    doctor = Doctor(monitor)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    # multiprocessing's first import aliases __mp_main__ to the running __main__ (the script's
    # namespace here); restored below so that namespace does not outlive the run in-process.
    saved_mp_main = sys.modules.get("__mp_main__")
    sys.argv = argv
    if kind == "path":
        sys.path.insert(0, str(Path(target).resolve().parent))
    else:
        sys.path.insert(0, os.getcwd())
    code = 0
    doctor.install()
    try:
        if kind == "path":
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except HealthError as e:
        print(f"treeqa doctor: {e}", file=sys.stderr)
        code = 3
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        doctor.uninstall()
        sys.argv, sys.path[:] = saved_argv, saved_path
        if saved_mp_main is not None:
            sys.modules["__mp_main__"] = saved_mp_main
        else:
            sys.modules.pop("__mp_main__", None)
        sys.stdout.flush()
    result = monitor.finish()
    return code, result
