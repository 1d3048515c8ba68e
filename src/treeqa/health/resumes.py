"""``optimiser-state-not-loaded``: a run resumed from a checkpoint that holds its optimisers'
states (or its learning-rate schedulers'), with an optimiser (or a scheduler) started afresh.

A checkpoint saved as ``{"model": model.state_dict(), "optimizer": optimizer.state_dict(),
...}`` and loaded with ``model.load_state_dict(ckpt["model"])`` alone resumes the weights but
not Adam's moments or step count: the first updates after the resume are as large as at the
start of training (its bias correction at step 1 with moments at zero), and the loss jumps.

What each ``torch.load`` returns is looked through (the object, the values of a dict and the
items of a list, two levels down, ``ITEMS`` entries a level) for optimiser states (``{"state":
..., "param_groups": [...]}``) whose ``state`` is not empty (plain SGD keeps none: a fresh one
is the same), schedulers' states past their first step, and the dicts (and their first tensors)
a module may load: a module is loaded from a checkpoint when its ``load_state_dict`` is given
one of those (or a dict of the same tensors under other names), or when it is a whole model in
one (``torch.save(model)``). Weights and optimiser state in separate files (``model.pt``,
``optimizer.pt``) count alike, in either order.

Each optimiser is judged at its first step after such a load, for ``LOOK_STEPS`` steps: one
that loaded a state since (``Optimizer.load_state_dict``), or that stepped before the load (a
run that rolls back to its best weights keeps its live optimiser), is not fresh; a fresh one
whose parameters' weights mostly (half their values or more) came from a checkpoint and that
is laid out as a saved state no optimiser has loaded (as many parameters in each group, the
saved moments shaped as these parameters) is the finding, at the ``torch.load`` line. Each
saved state is claimed once: a GAN's two optimisers are matched each to its own. A scheduler is
judged at its first step after an optimiser stepped since the load (a scheduler fast-forwarded
by ``step()`` calls before training reads as loaded): a scheduler of a saved state's kind (its
keys all the scheduler's attributes, as many base rates) over such parameters, at its step 0
where the saved one was further on, started afresh, where its optimiser resumes the saved
training (loaded a state, or was found fresh as one). A fine-tuning with a new head or another
grouping of the parameters is laid out otherwise and is not judged; a fine-tuning of the very
same model with a new optimiser on purpose reads as this.

An optimiser's (or scheduler's) state kept in a file of its own that the run never reads is
found when the run saves its own: ``torch.save`` of such a state as ``NAME`` (``optimizer.pt``)
while a fresh optimiser trains weights loaded from a file in a folder that holds a ``NAME`` no
``torch.load`` of the run has read. That file is read (``weights_only``, memory-mapped where it
can be) and judged as a saved state: laid out as the fresh optimiser (of the fresh scheduler's
kind, its optimiser resuming), it is the finding, at the ``torch.load`` line of the weights.
"""

from __future__ import annotations

import collections
import itertools
import os
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from treeqa.health import sites
from treeqa.health.findings import Finding

DEPTH = 2
"""Levels of a loaded checkpoint looked through (Lightning keeps its optimiser states in a list
under ``optimizer_states``)."""
ITEMS = 256
"""Entries of each dict or list of a loaded checkpoint looked at: a checkpoint's are few, and a
dataset saved as a list of a million samples is no checkpoint to walk."""
SHAPES_LOOKED_AT = 8
"""Parameters at each end of the optimiser whose saved moments' shapes are compared."""
RECENT = 8
"""Loads whose dicts a module's ``load_state_dict`` is matched against (weights, optimiser and
scheduler in files of their own are three)."""
LOOK_STEPS = 100
"""Optimiser steps after a load within which a fresh optimiser is matched to a saved state."""

Saved = tuple[str, str, dict[str, Any]]
"""(the ``torch.load`` line, where in what it returned, e.g. "under 'optimizer'", the state)."""
Part = tuple[str, str, str, str]
"""Of a finding: (what the checkpoint holds, what started afresh, whose ``load_state_dict`` was
not called, what follows)."""


class Resumes:
    """Fed by the loss checks' wrappers of ``torch.load`` and ``nn.Module.load_state_dict`` and
    by the doctor's of ``Optimizer.load_state_dict``, the optimiser's step and the scheduler's.
    ``watching``: an optimiser's step has something to look at."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.saved: list[Saved] = []  # optimiser states no optimiser has loaded or matched
        self.schedulers: list[Saved] = []  # schedulers' states, likewise
        # Of each of the last RECENT loads: (id, length) of its dicts and the ids of their first
        # tensors, what a module's load_state_dict may be given (ids only: no checkpoint is
        # kept alive; a dataset read file by file is no growing set)
        self.recent: collections.deque[Load] = collections.deque(maxlen=RECENT)
        self.modules: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # loaded from a checkpoint
        # An optimiser's state in a file of its own, never read: the folders modules' weights
        # were loaded from (with the torch.load line), the files whose loads held an optimiser's
        # state, the optimisers started afresh over loaded weights, the names saved and looked for
        self.folders: dict[str, str] = {}
        self.read: set[str] = set()
        self.fresh: weakref.WeakSet[Any] = weakref.WeakSet()  # optimisers and schedulers
        self.looked_for: set[str] = set()
        # a scheduler's state found so, judged once its optimiser resumes (it may be saved first)
        self.pending: list[tuple[Saved, weakref.ref[LRScheduler]]] = []
        # optimisers that resume a saved training: loaded a state, or found fresh as one
        self.resuming: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.sorting = 0  # optimiser steps left in which one is sorted into fresh or not
        self.sorted: weakref.WeakSet[Any] = weakref.WeakSet()
        self.peeking = False
        self.loaded: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # a state since
        self.judged: weakref.WeakSet[Any] = weakref.WeakSet()  # optimisers, schedulers
        self.steps_left = 0
        self.trained = False  # an optimiser stepped since the last load of a saved state
        self.watching = False
        self.said: dict[str, dict[str, tuple[Part, dict[str, Any]]]] = {}

    def checkpoint(self, loaded: Any, file: Any = None) -> None:
        """``torch.load`` returned ``loaded``, read from ``file`` (a path or an open file)."""
        if self.peeking:
            return
        where, dicts, tensors = "", set(), set()
        path = _path_of(file)
        for key, value in _nodes(loaded, "", DEPTH):
            if _is_state(value):
                where = where or sites.user_site()
                into = self.saved if _is_optimiser_state(value) else self.schedulers
                into.append((where, key, value))
                if path:
                    self.read.add(path)
            elif isinstance(value, dict):  # a state dict a module may load
                dicts.add((id(value), len(value)))
                first = next(iter(value.values()), None)
                if isinstance(first, torch.Tensor):
                    tensors.add(id(first))
        if dicts:
            self.recent.append(Load(dicts, tensors, path, sites.user_site() if path else ""))
        values = loaded.values() if isinstance(loaded, dict) else (loaded,)
        models = [v for v in values if isinstance(v, nn.Module)]  # torch.save(model)
        if models:
            self.modules.update(models)
            self._weights_from(path, sites.user_site())
        if where:
            self.steps_left, self.trained, self.judged = LOOK_STEPS, False, weakref.WeakSet()
        self._watch()

    def module_loaded(self, module: nn.Module, state_dict: Any) -> None:
        """``module.load_state_dict(state_dict)``: from a checkpoint, or a dict of its tensors."""
        if not isinstance(state_dict, dict) or not self.recent:
            return
        first = id(next(iter(state_dict.values()), None))
        given = (id(state_dict), len(state_dict))
        load = next((r for r in self.recent if given in r.dicts or first in r.tensors), None)
        if load is not None:
            self.modules.add(module)
            self._weights_from(load.path, load.where)

    def _weights_from(self, path: str, where: str) -> None:
        """A module's weights came from the file at ``path`` ("" for an open file or a
        buffer), loaded at ``where``: its folder is where an optimiser's state saved apart
        would be."""
        if path:
            self.folders[os.path.dirname(path)] = where
            self.sorting = LOOK_STEPS
            self._watch()

    def optimiser_loaded(self, optimizer: torch.optim.Optimizer, state: Any) -> None:
        """``optimizer.load_state_dict(state)``: that state is claimed, the optimiser no fresh one."""
        self.loaded.add(optimizer)
        self.resuming.add(optimizer)
        self.saved = [s for s in self.saved if s[2] is not state]
        self._watch()

    def stepped(self, optimizer: torch.optim.Optimizer, step: int, live: bool) -> None:
        """An optimiser step (the run's ``step``) ended; ``live``: the optimiser stepped before
        (before the load, since each is judged once after it)."""
        self.trained = True
        self._sort(optimizer, live)
        self.steps_left -= 1
        if self.steps_left <= 0:
            self.saved = []
        if optimizer in self.judged or not self.saved:
            self._watch()
            return
        self.judged.add(optimizer)
        fresh = not live and optimizer not in self.loaded
        params = [p for group in optimizer.param_groups for p in group["params"]]
        found = None
        if fresh and not isinstance(optimizer, torch.optim.LBFGS) and self._resumed(params):
            found = next((s for s in self.saved if _laid_out_as(s[2], optimizer)), None)
        if found is not None:
            self.saved.remove(found)
            self.resuming.add(optimizer)
            self._say_optimiser(found, optimizer, len(params), step)
        self._watch()

    def _sort(self, optimizer: torch.optim.Optimizer, live: bool) -> None:
        """At its first step within ``LOOK_STEPS`` after weights were loaded from a file: an
        optimiser that loaded no state and did not step before, over mostly loaded weights, is
        fresh (its state saved apart is looked for when the run saves it)."""
        if self.sorting <= 0:
            return
        self.sorting -= 1
        if optimizer in self.sorted:
            return
        self.sorted.add(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if not live and optimizer not in self.loaded and self._resumed(params):
            self.fresh.add(optimizer)

    def saving(self, obj: Any, file: Any) -> None:
        """``torch.save(obj, file)`` is about to write: where ``obj`` holds an optimiser's (or a
        scheduler's) state and a fresh one trains loaded weights, the file of that name beside
        the weights, never read, is looked into (once a name) for the state it should have
        loaded."""
        fresh = [o for o in self.fresh if o not in self.loaded]
        name = os.path.basename(_path_of(file))
        if not fresh or not name or name in self.looked_for:
            return
        if not any(_is_state(v) for _, v in _nodes(obj, "", DEPTH)):
            return
        self.looked_for.add(name)
        for folder, where in self.folders.items():
            beside = os.path.join(folder, name)
            if beside in self.read or not os.path.isfile(beside):
                continue
            for key, state in self._peek(beside):
                place = f"in {name!r} beside it, never read" + (
                    f", {key}" if key != "the whole file" else ""
                )
                if _is_scheduler_state(state):
                    schedulers = (s for s in fresh if isinstance(s, LRScheduler))
                    scheduler = next((s for s in schedulers if _of_kind(state, s)), None)
                    if scheduler is not None:
                        fresh.remove(scheduler)
                        self.fresh.discard(scheduler)
                        self.pending.append(((where, place, state), weakref.ref(scheduler)))
                    continue
                optimizers = (o for o in fresh if isinstance(o, torch.optim.Optimizer))
                optimizer = next((o for o in optimizers if _laid_out_as(state, o)), None)
                if optimizer is not None:
                    fresh.remove(optimizer)
                    self.fresh.discard(optimizer)
                    self.resuming.add(optimizer)
                    params = sum(len(g["params"]) for g in optimizer.param_groups)
                    self._say_optimiser((where, place, state), optimizer, params, 0, True)
        waiting = []
        for saved, ref in self.pending:
            scheduler = ref()
            if scheduler is not None and scheduler.optimizer in self.resuming:
                self._say_scheduler(saved, scheduler, True)
            elif scheduler is not None:
                waiting.append((saved, ref))
        self.pending = waiting

    def _peek(self, path: str) -> list[tuple[str, dict[str, Any]]]:
        """The optimiser and scheduler states in the file at ``path``: (where in it, the state). Read with
        ``weights_only`` (no code of the file runs), memory-mapped where its format allows; a
        file that does not read so holds none we can tell."""
        self.peeking = True
        try:
            try:
                loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:  # the legacy format cannot be memory-mapped
                loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # not torch's, or pickled objects weights_only refuses
            return []
        finally:
            self.peeking = False
        return [(k, v) for k, v in _nodes(loaded, "", DEPTH) if _is_state(v)]

    def scheduler_stepped(self, scheduler: LRScheduler) -> None:
        """A learning-rate scheduler's ``step`` starts (``last_epoch`` before it)."""
        if scheduler.last_epoch < 0:  # (the step its constructor takes)
            return
        if self.sorting > 0 and scheduler not in self.sorted:  # a state saved apart?
            self.sorted.add(scheduler)
            params = [p for group in scheduler.optimizer.param_groups for p in group["params"]]
            if scheduler.last_epoch == 0 and self._resumed(params):
                self.fresh.add(scheduler)
        if not self.schedulers or not self.trained or scheduler in self.judged:
            return
        if scheduler.optimizer not in self.resuming:  # a fine-tuning: its optimiser is new
            return
        self.judged.add(scheduler)
        params = [p for group in scheduler.optimizer.param_groups for p in group["params"]]
        found = next((s for s in self.schedulers if _of_kind(s[2], scheduler)), None)
        if found is None or not self._resumed(params):
            return
        self.schedulers.remove(found)
        if scheduler.last_epoch == 0:
            self._say_scheduler(found, scheduler)
        self._watch()

    def _say_scheduler(self, saved: Saved, scheduler: LRScheduler, beside: bool = False) -> None:
        where, key, state = saved
        part = (
            f"{'has' if beside else 'holds'} a learning-rate scheduler's state ({key}, at its "
            f"step {state['last_epoch']})",
            f"the {type(scheduler).__name__} stepping it",
            "scheduler",
            "its schedule starts over, the rate back at its first step's",
        )
        evidence = {"scheduler_key": key, "scheduler_step_in_checkpoint": state["last_epoch"]}
        self._say(where, f"scheduler {key}", part, evidence)

    def _watch(self) -> None:
        self.watching = (
            bool(self.saved) or (bool(self.schedulers) and not self.trained) or self.sorting > 0
        )

    def _resumed(self, params: list[torch.Tensor]) -> bool:
        """Half the parameters' values or more belong to modules loaded from a checkpoint (a
        temperature kept as a bare parameter beside the model is restored some other way)."""
        loaded = {id(p) for m in self.modules for p in m.parameters()}
        total = sum(p.numel() for p in params)
        return total > 0 and 2 * sum(p.numel() for p in params if id(p) in loaded) >= total

    def _say_optimiser(
        self,
        saved: Saved,
        optimizer: torch.optim.Optimizer,
        params: int,
        step: int,
        beside: bool = False,
    ) -> None:
        where, key, state = saved
        steps = steps_taken(state)
        kept = sorted({k for s in state["state"].values() if isinstance(s, dict) for k in s})
        if "exp_avg_sq" in kept:
            then = (
                "its moments and step count restart at zero, so its first updates after the "
                "resume are as large as at the start of training"
            )
        elif "momentum_buffer" in kept:
            then = (
                "its momentum restarts at zero, so its updates after the resume start "
                "smaller than the run's (a tenth of them at momentum 0.9) and build up again"
            )
        else:
            then = f"what it keeps between steps ({', '.join(kept)}) restarts from nothing"
        part = (
            f"{'has' if beside else 'holds'} an optimiser's state ({key}"
            + (f", {steps} steps taken)" if steps else ")"),
            f"the {type(optimizer).__name__} training them",
            "optimizer",
            then,
        )
        evidence = {"key": key, "steps_in_checkpoint": steps, "parameters": params}
        self._say(where, f"optimiser {key}", part, evidence, step)

    def _say(
        self, where: str, what: str, part: Part, evidence: dict[str, Any], step: int = 0
    ) -> None:
        """The finding of the ``torch.load`` at ``where``: each state left unloaded that it
        held, said again as one when another is found."""
        said = self.said.setdefault(where, {})
        said[what] = (part, evidence)
        parts = [p for p, _ in said.values()]
        held, who = (" and ".join(p[i] for p in parts) for i in range(2))
        calls = " or ".join(sorted({f"{p[2]}.load_state_dict" for p in parts}))
        found = Finding(
            "optimiser-state-not-loaded",
            "warning",
            f"the checkpoint loaded here {held} for parameters whose weights were loaded "
            f"from a checkpoint, but {who} started afresh (no {calls} call): "
            + "; ".join(p[3] for p in parts),
            where=where,
            step=step,
            evidence=evidence if len(said) == 1 else {"states": [e for _, e in said.values()]},
        )
        self.add(found)


class Load(NamedTuple):
    """Of one ``torch.load``: (id, length) of the dicts it returned and the ids of their first
    tensors (what a module's ``load_state_dict`` may be given), the file's path and the line."""

    dicts: set[tuple[int, int]]
    tensors: set[int]
    path: str
    where: str


def _path_of(file: Any) -> str:
    """The absolute path of what ``torch.load`` or ``torch.save`` was given: a path, or an
    open file's name; "" for a buffer."""
    name = file if isinstance(file, str | os.PathLike) else getattr(file, "name", None)
    if isinstance(name, str | os.PathLike):  # (a Path has a name too: its last part)
        return os.path.abspath(os.fspath(name))
    return ""


def _nodes(obj: Any, key: str, depth: int) -> Iterator[tuple[str, Any]]:
    """(where it is, e.g. "under 'optimizer'", the object) of ``obj`` and of every dict value
    and list item ``depth`` levels below it; an optimiser's or scheduler's state is not looked
    into."""
    yield key or "the whole file", obj
    if depth > 0 and not _is_state(obj):
        for where, value in _entries(obj, key):
            yield from _nodes(value, where, depth - 1)


def _entries(obj: Any, key: str) -> list[tuple[str, Any]]:
    """(where, value) of the first ``ITEMS`` entries of a dict or list; none of anything else."""
    if isinstance(obj, dict):
        kept = itertools.islice(obj.items(), ITEMS)
        return [(f"under {k!r}", v) for k, v in kept if isinstance(k, str | int)]
    if isinstance(obj, list | tuple):
        return [(f"item {i}" + (f" {key}" if key else ""), v) for i, v in enumerate(obj[:ITEMS])]
    return []


def _is_optimiser_state(obj: Any) -> bool:
    """An optimiser's ``state_dict`` with state kept (plain SGD keeps none)."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("state"), dict)
        and bool(obj["state"])
        and isinstance(obj.get("param_groups"), list)
        and all(isinstance(g, dict) and "params" in g for g in obj["param_groups"])
    )


def _is_state(obj: Any) -> bool:
    return _is_optimiser_state(obj) or _is_scheduler_state(obj)


def _is_scheduler_state(obj: Any) -> bool:
    """A learning-rate scheduler's ``state_dict`` past its first step."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("last_epoch"), int)
        and obj["last_epoch"] > 0
        and "_step_count" in obj
        and isinstance(obj.get("base_lrs"), list)
    )


def _of_kind(saved: dict[str, Any], scheduler: LRScheduler) -> bool:
    """The saved state is of a scheduler like this one: its keys all the scheduler's
    attributes, as many base rates."""
    return all(k in vars(scheduler) for k in saved) and len(saved["base_lrs"]) == len(
        scheduler.base_lrs
    )


def _laid_out_as(saved: dict[str, Any], optimizer: torch.optim.Optimizer) -> bool:
    """The saved state is of an optimiser like this one: as many parameters in each group, and
    each saved moment (a tensor of one dimension or more) shaped as its parameter, looked at
    for the first and last ``SHAPES_LOOKED_AT`` parameters."""
    groups = saved["param_groups"]
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in optimizer.param_groups]:
        return False
    ids = [i for g in groups for i in g["params"]]
    params = [p for g in optimizer.param_groups for p in g["params"]]
    ends = range(len(params))
    for at in {*ends[:SHAPES_LOOKED_AT], *ends[-SHAPES_LOOKED_AT:]}:
        state = saved["state"].get(ids[at])
        if not isinstance(state, dict):
            continue
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                if value.shape != params[at].shape:
                    return False
    return True


def steps_taken(state_dict: Any) -> int:
    """The most steps any parameter's state counts in an optimiser's ``state_dict`` (Adam's,
    AdamW's, RMSprop's ``step``); 0 where none does."""
    state = state_dict.get("state") if isinstance(state_dict, dict) else None
    if not isinstance(state, dict):
        return 0
    steps = [s.get("step") for s in state.values() if isinstance(s, dict)]
    counts = [int(float(v)) for v in steps if isinstance(v, int | float | torch.Tensor)]
    return max(counts, default=0)
