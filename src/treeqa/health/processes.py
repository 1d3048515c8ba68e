"""``treeqa doctor -- torchrun ...`` (or a script's ``torch.multiprocessing.spawn``): every
process of a data-parallel script under the monitor, and what only the processes side by side
show.

torchrun is run (in this process) with each worker as ``python -m treeqa doctor -- python SCRIPT.py ARGS``
(``spawn`` is given ``Watched(fn)`` for ``fn``). Each worker writes its report to a folder
(named in ``PROCESSES_ENV`` for torchrun's; process 0 prints its findings as they come, the
others keep quiet); on sampled steps each also notes a fingerprint of the weights its optimiser
steps and of its first forward's first input tensor. The launching doctor merges the reports: a finding is said once, with the processes that made it, and two
checks compare the processes:

- ``gradients-not-averaged``: the weights differ between processes after a step. Each trains a
  copy of its own (a model never wrapped in ``DistributedDataParallel``, or called around the
  wrapper), and the one saved saw a share of the data.
- ``same-data-on-every-process``: every process got the same batches (no ``DistributedSampler``):
  N processes do the work of one.

Sharded training (FSDP, DTensor parameters, process groups of its own) holds different weights
on purpose and is not compared.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from treeqa.health import report
from treeqa.health.findings import SEVERITIES, Finding, key_of

PROCESSES_ENV = "TREEQA_DOCTOR_PROCESSES"
"""The folder each worker writes ``rank{R}.json`` to; set only by a launching doctor."""

MOST_PRINTS = 40
"""Fingerprints kept per process (sampled steps: the first 3, then every ``--every``)."""
CHUNK = 1 << 22
"""Elements cast to float64 at a time (32 MB): a fingerprint copies no whole tensor."""
SAMPLE = 1 << 16
"""Elements of each weight tensor in its fingerprint (a strided sample): weights that part
differ nearly everywhere, and a large model's fingerprint stays cheap."""
SIDE_BY_SIDE = ("gradients-not-averaged", "same-data-on-every-process", "evaluation-on-one-shard")
"""The findings only the processes side by side show."""
SHARDING = ("torch.distributed.fsdp", "torch.distributed._composable", "deepspeed", "fairscale")
"""Packages whose modules hold a different part of the weights on each process."""


LAUNCHERS = "torchrun, python -m torch.distributed.run, accelerate launch"
"""The launchers whose processes ``treeqa doctor`` watches, as its errors name them."""
ACCELERATE = ("accelerate.commands.launch",)
"""``python -m`` names of ``accelerate launch``."""


class Launched(NamedTuple):
    """A launcher's command, split: which launcher, its own options, and the python command
    each process it starts runs."""

    launcher: str  # "torchrun" | "accelerate"
    options: list[str]
    worker: list[str]


def launcher_split(command: Sequence[str]) -> Launched | None:
    """What ``command`` launches when it runs ``torchrun [OPTIONS] SCRIPT ARGS`` (or ``python
    -m torch.distributed.run ...``) or ``accelerate launch [OPTIONS] SCRIPT ARGS`` (or
    ``accelerate-launch``, ``python -m accelerate.commands.launch``); None for a plain python
    command. The launcher's own parser finds where its options end."""
    args = list(command)
    name = Path(args[0]).name if args else ""
    module = args[2] if len(args) >= 3 and name.startswith("python") and args[1] == "-m" else ""
    if name == "torchrun" or module == "torch.distributed.run":
        return _torchrun_split(args[1 if name == "torchrun" else 3 :])
    if module == "torch.distributed.launch":  # it passes --local-rank; torchrun does not
        raise ValueError(
            "torch.distributed.launch is deprecated: run the script with torchrun "
            "(treeqa doctor -- torchrun ... SCRIPT.py), reading LOCAL_RANK from the environment"
        )
    if name == "accelerate":
        if args[1:2] != ["launch"]:
            given = " ".join(args[:2])
            raise ValueError(
                f"{given}: of accelerate's commands the doctor runs `accelerate launch` "
                "alone (treeqa doctor -- accelerate launch [OPTIONS] SCRIPT.py)"
            )
        return _accelerate_split(args[2:])
    if name == "accelerate-launch" or module in ACCELERATE:
        return _accelerate_split(args[1 if name == "accelerate-launch" else 3 :])
    return None


def _parse(parser: argparse.ArgumentParser, prog: str, rest: list[str]) -> argparse.Namespace:
    """``rest`` read by a launcher's own parser, or a ValueError after it printed why not."""
    parser.prog = prog
    try:
        return parser.parse_args(rest)
    except SystemExit:
        raise ValueError(f"{prog}'s options could not be read (see above)") from None


def _torchrun_split(rest: list[str]) -> Launched:
    from torch.distributed.run import get_args_parser

    parsed = _parse(get_args_parser(), "torchrun", rest)
    if parsed.no_python:
        raise ValueError("torchrun --no-python runs no Python script: nothing to watch")
    flags = ("-m", "--module", "--run-path", "--run_path")
    return Launched("torchrun", *_script_apart(rest, parsed, flags))


def _accelerate_split(rest: list[str]) -> Launched:
    """``accelerate launch``'s options and script: run as accelerate runs them, with one python
    process (its simple launcher) or several started by torchrun (``--multi_gpu``, FSDP,
    DeepSpeed on one node). Not those it starts some other way."""
    try:
        from accelerate.commands.launch import launch_command_parser
    except ImportError:
        raise ValueError(
            "accelerate launch: accelerate is not installed here (pip install accelerate)"
        ) from None
    parsed = _parse(launch_command_parser(), "accelerate launch", rest)
    if parsed.no_python:
        raise ValueError("accelerate launch --no_python runs no Python script: nothing to watch")
    started = {"--tpu": "torch_xla", "--mpirun_hostfile": "mpirun"}
    for flag, by in started.items():
        if getattr(parsed, flag[2:]):
            raise ValueError(
                f"accelerate launch {flag}: its processes are started by {by}, which the doctor "
                f"does not watch; it watches those of {LAUNCHERS} (without {flag}: one process, "
                "or --multi_gpu --num_processes N, which starts them with torchrun)"
            )
    return Launched("accelerate", *_script_apart(rest, parsed, ("-m", "--module")))


def _script_apart(
    rest: list[str], parsed: Any, flags: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    """The launcher's options (less ``flags``, those saying how to run the script) and the
    python command that runs the script."""
    script_at = len(rest) - len(parsed.training_script_args) - 1
    options = [a for a in rest[:script_at] if a not in flags]
    script = ["-m", parsed.training_script] if parsed.module else [parsed.training_script]
    return options, ["python", *script, *parsed.training_script_args]


def worker_folder() -> Path | None:
    """The folder this process reports to, when a launching doctor started it: one of
    torchrun's workers (``RANK`` in its environment), or the one process ``accelerate launch``
    starts itself (process 0)."""
    folder = os.environ.get(PROCESSES_ENV)
    return Path(folder) if folder else None


def worker_rank() -> int:
    """This worker's process index: torchrun's ``RANK``, 0 for accelerate's one process."""
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """The processes training together (1 where no process group is set up)."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _distributed() -> bool:
    return world_size() > 1


def _first_tensor(args: Any) -> torch.Tensor | None:
    """The first tensor among a forward's arguments, looking one level into lists and dicts."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
        inner = a.values() if isinstance(a, dict) else a if isinstance(a, list | tuple) else ()
        for b in inner:
            if isinstance(b, torch.Tensor):
                return b
    return None


def is_dtensor(x: Any) -> bool:
    """``x`` is a ``DTensor`` (the parameters ``fully_shard`` makes), told without importing
    torch.distributed: the class is ``torch.distributed.tensor``'s from torch 2.5, and
    ``torch.distributed._tensor``'s before (2.4 has a ``torch.distributed.tensor`` without it)."""
    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        dtensor = getattr(sys.modules.get(name), "DTensor", None)
        if dtensor is not None:
            return isinstance(x, dtensor)
    return False


def local_part(x: torch.Tensor) -> torch.Tensor:
    """This process's part of ``x`` where it is a ``DTensor`` (the parameters ``fully_shard``
    makes), read without a collective; else ``x``."""
    to_local = getattr(x, "to_local", None)
    return to_local() if callable(to_local) else x


def moments(x: torch.Tensor, most: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``x``'s sum and sum of squares in float64, on its device, cast a chunk at a time; of
    every k-th element only, k the smallest that leaves at most ``most`` (when given). Of a
    ``DTensor``, this process's part's."""
    flat = local_part(x.detach()).reshape(-1)
    if most and flat.numel() > most:
        flat = flat[:: -(-flat.numel() // most)]
    sums, squares = [], []
    for part in flat.split(CHUNK):
        part = part.double()
        sums.append(part.sum())
        squares.append(torch.dot(part, part))
    if not sums:  # an empty tensor
        zero = torch.zeros((), dtype=torch.float64, device=x.device)
        return zero, zero
    return torch.stack(sums).sum(), torch.stack(squares).sum()


class Fingerprints:
    """What one worker's sampled steps trained: its weights' sum and sum of squares after the
    step, and its first input's shape and sum (``moments``: float64, reduced on the device, read
    once at the step's end)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.weights: dict[int, list[float]] = {}
        self.batches: dict[int, list[float]] = {}
        self.batch: tuple[list[int], torch.Tensor] | None = None
        self.sharded = False
        self.groups = 0  # process groups the script made besides the default one
        self.distributed = False  # a process group of 2 or more was up on a sampled step
        self.evaluations = 0  # forwards of a trained model in an evaluation
        # Of those, the ones over a loader's share; (1/share, where, step) at the first.
        self.shard_forwards = 0
        self.first_shard: tuple[int, str, int] | None = None

    def note_group(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``new_group(ranks)`` over some of the processes (tensor or pipeline parallelism); a
        group of them all (a gloo group beside NCCL's) shards nothing."""
        ranks = kwargs.get("ranks", args[0] if args else None)
        if ranks is not None and len(ranks) < torch.distributed.get_world_size():
            self.groups += 1

    def evaluation(self, step: int, shard: int, where: str) -> None:
        """A trained model's forward in an evaluation after ``step``; ``shard`` > 1: over a
        loader made since then that gives this process 1/shard of its data (a
        ``DistributedSampler``)."""
        self.evaluations += 1
        if shard > 1:
            self.shard_forwards += 1
            self.first_shard = self.first_shard or (shard, where, step)

    def forward(self, args: Any, sampled: bool) -> None:
        """A trained model's forward: the step's first notes its first input."""
        if not sampled or self.batch is not None or len(self.weights) >= MOST_PRINTS:
            return
        x = _first_tensor(args)
        if x is not None and _distributed():
            self.batch = (list(x.shape), moments(x)[0])

    def end_step(
        self, step: int, sampled: bool, models: Sequence[nn.Module], params: Iterable[Any]
    ) -> None:
        batch, self.batch = self.batch, None
        if not sampled or not _distributed():
            return
        self.distributed = True
        if len(self.weights) >= MOST_PRINTS:
            return
        weights = [p.detach() for p in params if isinstance(p, torch.Tensor)]
        if not weights:
            return
        self.sharded = self.sharded or _sharded(models, weights)
        each = [moments(w, SAMPLE) for w in weights]
        sums = torch.stack([s for s, _ in each]).sum()
        squares = torch.stack([q for _, q in each]).sum()
        read = torch.stack([sums, squares] + ([batch[1].to(sums.device)] if batch else [])).tolist()
        self.weights[step] = [float(len(weights)), *read[:2]]
        if batch is not None:
            self.batches[step] = [*map(float, batch[0]), read[2]]

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "weights": {str(s): v for s, v in self.weights.items()},
            "batches": {str(s): v for s, v in self.batches.items()},
            "sharded": self.sharded or self.groups > 0,
            "distributed": self.distributed,
            "evaluations": self.evaluations,
            # [forwards, 1/share, where, first step], or [] without any
            "on_shard": [self.shard_forwards, *self.first_shard] if self.first_shard else [],
        }


def _sharded(models: Sequence[nn.Module], weights: Sequence[torch.Tensor]) -> bool:
    """Models whose weights differ between processes by design."""
    modules = (type(m).__module__ for model in models for m in model.modules())
    return any(name.startswith(SHARDING) for name in modules) or any(map(is_dtensor, weights))


# ---------------------------------------------------------------- the processes side by side


def _common(per_process: Sequence[dict[str, list[float]]]) -> list[str]:
    steps = set.intersection(*(set(p) for p in per_process)) if per_process else set()
    return sorted(steps, key=int)


def gradients_not_averaged(prints: Sequence[dict[str, Any]]) -> Finding | None:
    """The weights of process k differ from the first process's (0, on one node) after a step
    both sampled."""
    if len(prints) < 2 or any(p["sharded"] for p in prints):
        return None
    weights = [p["weights"] for p in prints]
    for step in _common(weights):
        first = weights[0][step]
        for rank, other in ((p["rank"], p["weights"]) for p in prints[1:]):
            if other[step][0] != first[0]:  # another model on this process: not comparable
                return None
            norm = max(first[2], other[step][2]) ** 0.5
            if abs(first[2] - other[step][2]) > 1e-6 * norm**2 or abs(
                first[1] - other[step][1]
            ) > 1e-6 * max(norm, 1e-12):
                return Finding(
                    "gradients-not-averaged",
                    "error",
                    f"after step {step} the weights of process {rank} differ from process "
                    f"{prints[0]['rank']}'s "
                    f"(sum of squares {other[step][2]:.6g} against {first[2]:.6g}): each of the "
                    f"{len(prints)} processes trains a model of its own, and the one saved saw "
                    "only its share of the data; the model is not wrapped in "
                    "DistributedDataParallel, or the loop calls the model inside the wrapper",
                    evidence={
                        "step": int(step),
                        "process": rank,
                        "sum_of_squares": [first[2], other[step][2]],
                        "processes": len(prints),
                    },
                    step=int(step),
                )
    return None


def same_data_on_every_process(prints: Sequence[dict[str, Any]], least: int = 2) -> Finding | None:
    """Every process's first input had the same shape and sum on ``least`` or more sampled
    steps, and on all it was compared."""
    if len(prints) < 2:
        return None
    batches = [p["batches"] for p in prints]
    steps = _common(batches)
    if len(steps) < least or any(b[s] != batches[0][s] for s in steps for b in batches[1:]):
        return None
    return Finding(
        "same-data-on-every-process",
        "warning",
        f"all {len(prints)} processes trained on the same batches on the {len(steps)} sampled "
        "steps compared (the first input of each forward had the same shape and sum): they do "
        "the work of one, each epoch showing every example to all of them",
        evidence={"steps": [int(s) for s in steps], "processes": len(prints)},
        step=int(steps[0]),
    )


def evaluation_on_one_shard(prints: Sequence[dict[str, Any]]) -> Finding | None:
    """A process evaluated over its ``DistributedSampler`` share of a loader while another did
    not evaluate at all: the scores cover that share alone."""
    alone = [p for p in prints if p.get("on_shard")]
    idle = [p["rank"] for p in prints if p.get("evaluations", 0) == 0]
    if not alone or not idle or not all(p.get("distributed") for p in prints):  # a sweep
        return None
    forwards, shard, where, step = alone[0]["on_shard"]
    return Finding(
        "evaluation-on-one-shard",
        "warning",
        f"process {alone[0]['rank']} evaluated over a loader whose DistributedSampler gives it "
        f"1/{shard} of the data ({forwards} forwards), while process {idle[0]} did not "
        f"evaluate: its scores are those of 1/{shard} of the evaluation set",
        where=where,
        evidence={"share": f"1/{shard}", "forwards": forwards, "not_evaluating": idle},
        step=step,
    )


def merge(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report from every process's: process 0's series and steps; each finding once (the
    most severe, earliest), with the processes that made it; the side-by-side checks."""
    reports = sorted(reports, key=lambda r: r["process"]["rank"])
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for r in reports:
        rank = r["process"]["rank"]
        for f in r["findings"]:
            key = key_of(f["code"], f["where"], f["message"], f["evidence"])
            kept = merged.setdefault(key, {**f, "evidence": {**f["evidence"], "ranks": []}})
            kept["evidence"]["ranks"].append(rank)
            if SEVERITIES.index(f["severity"]) > SEVERITIES.index(kept["severity"]):
                kept["severity"] = f["severity"]
    everyone = [r["process"]["rank"] for r in reports]
    for f in merged.values():
        ranks = f["evidence"]["ranks"]
        if ranks != everyone:  # said by some processes only
            f["message"] += (
                f" (process{'es' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})"
            )
    prints = [r["process"] for r in reports]
    checks = (gradients_not_averaged, same_data_on_every_process, evaluation_on_one_shard)
    for found in (check(prints) for check in checks):
        if found is not None:
            merged[(found.code, "")] = found.to_json()  # said once, by all the processes
    order = {s: i for i, s in enumerate(reversed(SEVERITIES))}
    findings = sorted(merged.values(), key=lambda f: (order[f["severity"]], f["step"]))
    first = {k: v for k, v in reports[0].items() if k != "process"}
    return {
        **first,
        "findings": findings,
        "monitor_failures": [
            f"{said} (process {r['process']['rank']})"
            for r in reports
            for said in r.get("monitor_failures", [])
        ],
        "processes": [
            {
                "rank": p["rank"],
                "steps": r["steps"],
                "findings": len(r["findings"]),
                "steps_compared": len(p["weights"]),
            }
            for p, r in zip(prints, reports, strict=True)
        ],
    }


WATCHED = "_treeqa_watched"
"""Set on a process started with a ``Watched`` function (its arguments are dropped at start)."""


class Watched:
    """``torch.multiprocessing.spawn``'s function, run in each process it starts under a doctor
    of its own (spawn pickles this, and ``fn`` in it by reference, as it would pickle ``fn``).
    ``spawn_wrap`` runs it, where it could take torch's place; else torch calls it."""

    def __init__(self, fn: Any, folder: Path, every: int, mode: str):
        self.fn, self.folder, self.every, self.mode = fn, folder, every, mode

    def __call__(self, index: int, *args: Any) -> Any:
        from treeqa.health.launch import watch_process  # (which imports this module)

        return watch_process(self.fn, (index, *args), self.folder, index, self.every, self.mode)[0]


def _spawn_module() -> Any:
    """The module ``torch.multiprocessing.spawn`` (that name, as an attribute, is the function)."""
    return importlib.import_module("torch.multiprocessing.spawn")


def _torch_wrap() -> Any:
    """``torch.multiprocessing.spawn._wrap(fn, i, args, error_file)``: what each process spawn
    starts runs; it calls ``fn(i, *args)`` and sends the parent the traceback of an exception,
    formatted where it caught it. None where it is not so."""
    import inspect

    wrap = getattr(_spawn_module(), "_wrap", None)
    try:
        names = list(inspect.signature(wrap).parameters) if wrap is not None else []
    except (TypeError, ValueError):
        names = []
    return wrap if names == ["fn", "i", "args", "error_file"] else None


TORCH_WRAP = _torch_wrap()
"""torch's own ``_wrap``, read before a doctor puts ``spawn_wrap`` in its place."""


def spawn_wrap(fn: Any, i: int, args: tuple[Any, ...], error_file: str) -> None:
    """torch's ``_wrap`` with the doctor around it instead of between it and ``fn``: the traceback
    torch formats for the parent then holds the script's frames alone, as without the doctor
    (it had ``Watched.__call__`` and ``watch_process`` above the script's function)."""
    assert TORCH_WRAP is not None  # (put in place only where it is)
    if not isinstance(fn, Watched):
        TORCH_WRAP(fn, i, args, error_file)
        return
    from treeqa.health.launch import watch_process  # (which imports this module)

    watch_process(TORCH_WRAP, (fn.fn, i, args, error_file), fn.folder, i, fn.every, fn.mode)


def install_spawn_wrap() -> Any:
    """Put ``spawn_wrap`` in torch's place for the run; returns the undo (None where torch's
    ``_wrap`` is not the one this knows: then ``Watched`` runs under it, frames and all)."""
    module = _spawn_module()
    if TORCH_WRAP is None or getattr(module, "_wrap", None) is not TORCH_WRAP:
        return None
    module._wrap = spawn_wrap  # (start_processes reads it when it starts each process)
    return lambda: setattr(module, "_wrap", TORCH_WRAP)


def end_spawned(stop: bool, wait: float = 30.0) -> None:
    """The script is over while processes ``spawn`` started under ``Watched`` still run: SIGTERM
    stopped it in ``spawn``'s join (``stop``), or it never joined them. Stopped, they are sent
    SIGTERM (without the doctor they would be gone with the script: ``spawn`` has them signalled
    when their parent dies), given ``wait`` seconds to report and killed after that; else they
    are waited for, as Python's exit would. Either way they end before their reports are
    merged, not after the merge found none and their folder was removed."""
    alive = [p for p in multiprocessing.active_children() if vars(p).get(WATCHED)]
    if stop:
        for p in alive:
            p.terminate()
    deadline = time.monotonic() + wait
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()) if stop else None)
        if p.is_alive():  # blocked where no signal reaches its Python code
            p.kill()
            p.join()


def write_report(
    folder: Path, result: dict[str, Any], prints: Fingerprints, series: bool = False
) -> None:
    """One process's report, whole or not at all, for the merge (with its series when asked,
    else for each node's first process only: on several nodes, a node's merge stands on its
    lowest rank's)."""
    first = series or os.environ.get("LOCAL_RANK", str(prints.rank)) == "0"
    kept = result if first else {**result, "series": {}}
    path = folder / f"rank{prints.rank}.json"
    report.write_json({**kept, "process": prints.to_json()}, path)


def report_merged(
    folder: Path, json_path: Path | None, plot_path: Path | None, stream: Any
) -> dict[str, Any]:
    """Merge the reports in ``folder``; print the side-by-side findings and the summary; write
    the merged JSON and plot where asked."""
    reports = []
    for path in sorted(folder.glob("rank*.json")):
        with contextlib.suppress(ValueError, OSError):  # a process killed while writing
            reports.append(json.loads(path.read_text()))
    if not reports:
        print("treeqa doctor: no process wrote a report (see their output above)", file=stream)
        return {"findings": [], "steps": 0, "processes": []}
    result = merge(reports)
    for f in result["findings"]:
        if f["code"] in SIDE_BY_SIDE:
            print(report.one_line(Finding(**f)), file=stream)
    report.print_summary(result, stream)
    print(
        f"treeqa health: {len(reports)} process{'es' if len(reports) > 1 else ''} watched; "
        f"steps and series are process {result['processes'][0]['rank']}'s",
        file=stream,
    )
    if json_path is not None:
        report.write_json(result, json_path)
    if plot_path is not None:
        report.write_plot(result, plot_path)
    return result


def run_launcher(
    launched: Launched,
    *,
    json_path: Path | None,
    plot_path: Path | None,
    every: int,
    mode: str,
    stream: Any,
) -> tuple[int, dict[str, Any]]:
    """The launcher (torchrun, or accelerate's), in this process, with each process it starts
    under a doctor of its own; then merge, print and write their reports. The exit code is the
    first failed process's (1 when a signal ended it), 128 + N when signal N stopped the
    launcher, else 0."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    doctor = ["-m", "treeqa", "doctor", "--every", str(every)]
    doctor += ["--strict"] if mode == "strict" else []
    command = [*launched.options, *doctor, "--", *launched.worker]
    with tempfile.TemporaryDirectory(prefix="treeqa-doctor-") as folder:
        saved = os.environ.get(PROCESSES_ENV)
        os.environ[PROCESSES_ENV] = folder  # the workers' environment is this process's
        try:
            if launched.launcher == "accelerate":
                _accelerate_launch(command)
            else:
                from torch.distributed import run as torchrun

                torchrun.main(command)
            code = 0
        except ChildFailedError as e:  # torchrun has said which worker failed, and how
            code = max(e.get_first_failure()[1].exitcode, 1)
        except SignalException as e:  # Ctrl-C or SIGTERM: the workers stopped and reported
            code = 128 + int(e.sigval)
        except subprocess.CalledProcessError as e:  # accelerate's one process failed
            code = max(e.returncode, 1)
        except SystemExit as e:  # accelerate's exit for a signal, Ctrl-C, or --quiet's failure
            code = e.code if isinstance(e.code, int) else 1
        finally:
            if saved is None:
                os.environ.pop(PROCESSES_ENV)
            else:
                os.environ[PROCESSES_ENV] = saved
        return code, report_merged(Path(folder), json_path, plot_path, stream)


def _accelerate_launch(command: list[str]) -> None:
    """``accelerate launch COMMAND``, in this process: it starts the script's one process
    itself, or several through torchrun's ``run`` (which raises as ``torchrun.main`` does)."""
    from accelerate.commands.launch import launch_command, launch_command_parser

    launch_command(launch_command_parser().parse_args(command))
