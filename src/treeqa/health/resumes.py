"""``optimiser-state-not-loaded``: a run resumed from a checkpoint that holds its optimisers'
states (or its learning-rate schedulers'), with an optimiser (or a scheduler) started afresh.

A checkpoint saved as ``{"model": model.state_dict(), "optimizer": optimizer.state_dict(),
...}`` and loaded with ``model.load_state_dict(ckpt["model"])`` alone resumes the weights but
not Adam's moments or step count: the first updates after the resume are as large as at the
start of training (its bias correction at step 1 with moments at zero), and the loss jumps.

What each ``torch.load`` (and safetensors' ``load_file``) returns is looked through (the
object, the values of a dict and the items of a list, two levels down, ``ITEMS`` entries a
level; a ``SequentialLR``'s schedulers count as one level) for optimiser states (``{"state":
..., "param_groups": [...]}``) whose ``state`` is not empty (plain SGD keeps none: a fresh one
is the same), schedulers' states past their first step, and the dicts (and their first tensors)
a module may load: a module is loaded from a checkpoint when its ``load_state_dict`` is given
one of those (or a dict of the same tensors under other names), or when it is a whole model in
one (``torch.save(model)``). Weights and optimiser state in separate files (``model.pt``,
``optimizer.pt``) count alike, in either order. A file of the weights' folder named for an
optimiser or scheduler (``STATE_FILE``: ``optimizer.pt``, ``scheduler.bin``, ``optim_0.pth``)
that the run has not read is looked into when the weights are loaded (``weights_only``,
memory-mapped where it can be), its states counted as saved states beside the weights: a resume
that never reads it is found as one that leaves a checkpoint's state unloaded. Weights the run
saved itself (a rewind to the initial weights, folds reset from a file) are no resume. A
transformers model that ``from_pretrained`` read from a folder (its ``name_or_path``: a
``Trainer``'s ``checkpoint-N``) is loaded from that folder, looked into when the model first runs.

Each optimiser is judged at its first step after such a load, for ``LOOK_STEPS`` steps: one
that loaded a state since (``Optimizer.load_state_dict``, not a fresh one's own empty state, as
accelerate's ``prepare`` reloads it), or that stepped before the load (a run that rolls back to
its best weights keeps its live optimiser), is not fresh; a fresh one whose parameters' weights
mostly (half their values or more) came from a checkpoint, none of them a layer the load left
out (a head re-initialised for fine-tuning), and that is laid out as a saved state no optimiser
has loaded (as many parameters in each group, the saved moments shaped as these parameters and
kept under the same names: Adam's state is no SGD's) is the finding, at the ``torch.load`` line.
Each saved state is claimed once: a GAN's two optimisers are matched each to its own. A
scheduler is judged at its first step after an optimiser stepped since the load, where its
optimiser resumes the saved training (loaded a state, or was found fresh as one): a scheduler
of a saved state's kind (its keys all the scheduler's attributes, as many base rates) over such
parameters, that was at its step 0 when the run first stepped it and is still short of the
saved one's step, started afresh (one fast-forwarded by ``step()`` calls to the saved step
before training reads as loaded; one stepped at the start of each epoch is judged at its
second). A fine-tuning with a new head or another grouping of the parameters is laid out
otherwise and is not judged; a fine-tuning of the very same model with a new optimiser on
purpose reads as this.
"""

from __future__ import annotations

import collections
import itertools
import os
import re
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.kept_states import KeptStates

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
STATE_FILE = re.compile(r"optim|sched|^opt", re.IGNORECASE)
"""Names of the files beside the weights looked into for a state: the transformers
``Trainer``'s ``optimizer.pt`` and ``scheduler.pt``, accelerate's ``optimizer.bin``,
``optim.pth``, ``optD.pt``."""
FOLDER_ENTRIES = 256
"""Entries of the weights' folder looked at for those names."""
WRITTEN = 4096
"""Paths the run saved to that are remembered (a run saving a file a step stops adding)."""
OPENED = 64
"""Folders of weights files read whose reading line is remembered."""


class Saved(NamedTuple):
    """A saved state: the line of the load that found it, where it is in what was loaded ("under
    'optimizer'", "in 'optimizer.pt' beside it, never read"), the state, and the file it was
    looked into in beside the weights ("" for one the script read)."""

    where: str
    key: str
    state: dict[str, Any]
    beside: str = ""


Part = tuple[str, str, str, str]
"""Of a finding: (what the checkpoint holds, what started afresh, how: "no
optimizer.load_state_dict call", what follows)."""


class Resumes:
    """Fed by the loss checks' wrappers of ``torch.load``, ``torch.save``, safetensors'
    ``load_file`` and ``nn.Module.load_state_dict`` and by the doctor's of
    ``Optimizer.load_state_dict``, the optimiser's step and the scheduler's. ``watching``: an
    optimiser's step has something to look at."""

    def __init__(self, add: Callable[[Finding], None], steps: Callable[[], int] = int) -> None:
        """``steps()``: the optimiser steps of the run so far."""
        self.add, self.steps = add, steps
        self.kept = KeptStates(add, steps)  # state_dict()s loaded or saved without a copy
        self.saved: list[Saved] = []  # optimiser states no optimiser has loaded or matched
        # states an optimiser loaded: matched again where that optimiser is gone (rebuilt)
        self.claimed: list[tuple[Saved, weakref.ref[torch.optim.Optimizer]]] = []
        self.schedulers: list[Saved] = []  # schedulers' states, likewise
        # Of each of the last RECENT loads: (id, length) of its dicts and the ids of their first
        # tensors, what a module's load_state_dict may be given (ids only: no checkpoint is
        # kept alive; a dataset read file by file is no growing set)
        self.recent: collections.deque[Load] = collections.deque(maxlen=RECENT)
        # modules loaded from a checkpoint -> the line of the load their weights came from and
        # the folder of its file ("" for an open file or a buffer)
        self.modules: weakref.WeakKeyDictionary[nn.Module, tuple[str, str]] = (
            weakref.WeakKeyDictionary()
        )
        # their unloaded params, by id (a WeakSet of tensors compares them with ==: a tensor
        # of more than one value has no truth value)
        self.left_out: weakref.WeakValueDictionary[int, torch.Tensor] = (
            weakref.WeakValueDictionary()
        )
        self.folders: set[str] = set()  # the weights' folders looked in
        self.reading: dict[str, str] = {}  # folders weights were read from -> the first line
        self.pretrained_folders: set[str] = set()  # those a from_pretrained model names
        self.read: set[str] = set()  # files named for a state that the run read
        self.written: set[str] = set()  # files the run saved
        self.peeking = False
        self.loaded: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # a state since
        # optimisers that resume a saved training: loaded a state, or found fresh as one
        self.resuming: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.judged: weakref.WeakSet[Any] = weakref.WeakSet()  # optimisers, schedulers
        # a scheduler's step when the run first stepped it after the load, before training
        self.first_steps: weakref.WeakKeyDictionary[LRScheduler, int] = weakref.WeakKeyDictionary()
        self.steps_left = 0
        self.trained = False  # an optimiser stepped since the last load of a saved state
        self.watching = False
        self.said: dict[str, dict[str, tuple[Part, dict[str, Any]]]] = {}
        # modules a strict=False load filled nothing of -> the finding, said unless a later load
        # fills them (a script that tries again with the prefix stripped)
        self.unmatched: weakref.WeakKeyDictionary[nn.Module, Finding] = weakref.WeakKeyDictionary()

    def checkpoint(self, loaded: Any, file: Any = None) -> None:
        """``torch.load`` (or ``load_file``) returned ``loaded``, read from ``file`` (a path or
        an open file)."""
        if self.peeking:
            return
        path = _path_of(file)
        self.opened_at(path)
        if path and STATE_FILE.search(os.path.basename(path)):
            self.read.add(path)  # read after all: what was looked into there goes
            self.saved = [s for s in self.saved if s.beside != path]
            self.schedulers = [s for s in self.schedulers if s.beside != path]
        where, dicts, tensors = "", set(), set()
        for key, value in _nodes(loaded, "", DEPTH):
            if _is_state(value):
                where = where or sites.user_site()
                into = self.saved if _is_optimiser_state(value) else self.schedulers
                into.append(Saved(where, key, value))
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
            site = sites.user_site()
            self.modules.update((m, (site, os.path.dirname(path))) for m in models)
            self._weights_from(path, site)
        if where:
            self._look_again()

    def opened(self, file: Any) -> None:
        """safetensors' ``safe_open`` is about to read ``file``."""
        if not self.peeking:
            self.opened_at(_path_of(file))

    def opened_at(self, path: str) -> None:
        """A file at ``path`` was read: the line that read its folder first, for a model
        that names the folder later (transformers' ``from_pretrained``)."""
        folder = os.path.dirname(path)
        if path and folder not in self.reading and len(self.reading) < OPENED:
            self.reading[folder] = sites.user_site()

    def pretrained(self, module: nn.Module) -> None:
        """``module`` runs for the first time: a transformers model read by ``from_pretrained``
        from a folder of its own (its ``name_or_path``, a Trainer's ``checkpoint-N``) is
        loaded from a checkpoint there, the folder's state files looked into as beside its
        weights (``from_pretrained`` reads no optimiser; ``Trainer.train`` does, given
        ``resume_from_checkpoint``)."""
        folder = getattr(module, "name_or_path", None)
        if not isinstance(folder, str) or not folder or module in self.modules:
            return
        folder = os.path.abspath(folder)
        if not os.path.isdir(folder):  # (a model's name on the Hub)
            return
        where = self.reading.get(folder) or sites.user_site()
        self.modules[module] = (where, folder)
        self.pretrained_folders.add(folder)
        self._weights_from(os.path.join(folder, "config.json"), where)

    def saved_to(self, obj: Any, file: Any) -> None:
        """``torch.save`` is about to write ``obj`` to ``file``: weights loaded from it later
        are the run's own."""
        self.kept.saving(obj)
        path = _path_of(file)
        if path and len(self.written) < WRITTEN:
            self.written.add(path)

    def module_loaded(self, module: nn.Module, state_dict: Any, strict: Any = True) -> None:
        """``module.load_state_dict(state_dict, strict)``: from a checkpoint, or a dict of its
        tensors. Parameters the dict leaves out (``strict=False`` over a head of its own) are
        new; none of them in it at all, under ``strict=False``, is ``weights-not-loaded``."""
        if not isinstance(state_dict, dict):
            return
        if self.kept.loading(module, state_dict):  # (a state_dict() kept without a copy)
            return
        if not strict and state_dict:
            self._none_matched(module, state_dict)
        elif state_dict:  # a load that matched after all (a prefix stripped on a second try)
            self.unmatched.pop(module, None)
        if not self.recent:
            return
        first = id(next(iter(state_dict.values()), None))
        given = (id(state_dict), len(state_dict))
        load = next(
            (r for r in reversed(self.recent) if given in r.dicts or first in r.tensors), None
        )  # (the latest first: a freed dict's id may be an earlier load's)
        if load is None:
            return
        self.modules[module] = (load.where, os.path.dirname(load.path) if load.path else "")
        self.left_out.update(
            {id(p): p for n, p in module.named_parameters() if n not in state_dict}
        )
        self._weights_from(load.path, load.where)

    def _none_matched(self, module: nn.Module, state_dict: dict[Any, Any]) -> None:
        """``weights-not-loaded``: ``load_state_dict(..., strict=False)`` given a dict that names
        none of the module's parameters (torch then loads nothing and raises nothing: a
        checkpoint saved through ``DataParallel`` or ``torch.compile``, its keys prefixed
        ``module.`` or ``_orig_mod.``), said with the prefix the names differ by."""
        names = [n for n, _ in module.named_parameters()]
        if not names:
            return
        if any(n in state_dict for n in names):
            self.unmatched.pop(module, None)
            return
        given = next((k for k in state_dict if isinstance(k, str)), None)
        if given is None:
            return
        ends = [n for n in names if given.endswith("." + n)]
        starts = [n for n in names if n.endswith("." + given)]
        if ends:
            differ = (
                f"each given key starts with {given[: -len(ends[0])]!r}, which the module's do not"
            )
        elif starts:
            differ = (
                f"the module's names start with {starts[0][: -len(given)]!r}, which the keys do not"
            )
        else:
            differ = "the names share nothing"
        self.unmatched[module] = Finding(
            "weights-not-loaded",
            "error",
            f"load_state_dict(strict=False) loaded none of the {len(names)} parameters of "
            f"the {type(module).__name__}: none of the {len(state_dict)} keys given is one "
            f"of its names ({given!r} given; its first, {names[0]!r}), and {differ}: it "
            "keeps the weights it had",
            where=sites.user_site(),
            evidence={
                "parameters": len(names),
                "keys": len(state_dict),
                "given": given,
                "own": names[0],
            },
        )
        self._watch()

    def say_unmatched(self) -> None:
        """At an optimiser step, or when the script is over: what a
        ``load_state_dict(strict=False)`` loaded nothing into and no later load filled."""
        for found in self.unmatched.values():
            self.add(found)
        self.unmatched.clear()

    def _weights_from(self, path: str, where: str) -> None:
        """A module's weights came from the file at ``path`` ("" for an open file or a
        buffer), loaded at ``where``: the files of its folder named for a state that the run
        has neither read nor written are looked into, once a folder, their states counted as
        saved beside the weights."""
        if not path or path in self.written:  # weights the run saved itself: no resume
            return
        folder = os.path.dirname(path)
        if folder in self.folders:
            return
        self.folders.add(folder)
        found = False
        for name in _names(folder):
            beside = os.path.join(folder, name)
            if beside == path or beside in self.read or beside in self.written:
                continue
            for key, state in self._peek(beside):
                place = f"in {name!r} beside it, never read" + (
                    f", {key}" if key != "the whole file" else ""
                )
                into = self.saved if _is_optimiser_state(state) else self.schedulers
                into.append(Saved(where, place, state, beside))
                found = True
        if found:
            self._look_again()

    def _look_again(self) -> None:
        """Saved states arrived: the optimisers and schedulers are judged at their next step."""
        self.steps_left, self.trained, self.judged = LOOK_STEPS, False, weakref.WeakSet()
        self.first_steps = weakref.WeakKeyDictionary()
        self._watch()

    def _peek(self, path: str) -> list[tuple[str, dict[str, Any]]]:
        """The optimiser and scheduler states in the file at ``path``: (where in it, the
        state). Read with ``weights_only`` (no code of the file runs), memory-mapped where its
        format allows; a file that does not read so holds none we can tell."""
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

    def optimiser_loaded(self, optimizer: torch.optim.Optimizer, state: Any) -> None:
        """``optimizer.load_state_dict(state)``: that state is claimed, the optimiser no fresh
        one; unless the state is its own and empty (accelerate's ``prepare`` reloads a fresh
        optimiser's state to place it on the device)."""
        if _own_empty_state(optimizer, state):
            return
        self.loaded.add(optimizer)
        self.resuming.add(optimizer)
        ref = weakref.ref(optimizer)
        self.claimed += [(s, ref) for s in self.saved if s.state is state]
        self.saved = [s for s in self.saved if s.state is not state]
        self._watch()

    def stepped(self, optimizer: torch.optim.Optimizer, step: int, live: bool) -> None:
        """An optimiser step (the run's ``step``) ended; ``live``: the optimiser stepped before
        (before the load, since each is judged once after it)."""
        self.trained = True
        self.say_unmatched()  # (training with weights a load left as they were)
        self.steps_left -= 1
        if self.steps_left <= 0:
            self.saved, self.claimed = [], []
        dropped = [s for s, ref in self.claimed if ref() is None]  # loaded, then rebuilt
        if optimizer in self.judged or not (self.saved or dropped):
            self._watch()
            return
        self.judged.add(optimizer)
        fresh = not live and optimizer not in self.loaded
        params = [p for group in optimizer.param_groups for p in group["params"]]
        found = None
        if fresh and not isinstance(optimizer, torch.optim.LBFGS) and self._resumed(params):
            found = next(
                (
                    s
                    for s in self.saved + dropped
                    if _laid_out_as(s.state, optimizer) and self._from_its_folder(s, params)
                ),
                None,
            )
        if found is not None:
            self.saved = [s for s in self.saved if s is not found]
            self.claimed = [(s, ref) for s, ref in self.claimed if s is not found]
            self.resuming.add(optimizer)
            why = "its state went to an optimiser since rebuilt" if found in dropped else ""
            why = why or self._from_pretrained(found)
            self._say_optimiser(self._placed(found, params), optimizer, len(params), step, why)
        self._watch()

    def scheduler_stepped(self, scheduler: LRScheduler) -> None:
        """A learning-rate scheduler's ``step`` starts (``last_epoch`` before it)."""
        if scheduler.last_epoch < 0 or not self.schedulers:  # (the step its constructor takes)
            return
        if not self.trained:  # (a scheduler stepped at the start of each epoch, or fast-forwarded)
            self.first_steps.setdefault(scheduler, scheduler.last_epoch)
            return
        if scheduler in self.judged or _unwrapped(scheduler.optimizer) not in self.resuming:
            return  # (an optimiser that does not resume: a fine-tuning starts its schedule anew)
        self.judged.add(scheduler)
        params = [p for group in scheduler.optimizer.param_groups for p in group["params"]]
        found = next((s for s in self.schedulers if _of_kind(s.state, scheduler)), None)
        if found is None or not self._resumed(params):
            return
        self.schedulers.remove(found)
        first = self.first_steps.get(scheduler, scheduler.last_epoch)
        if first == 0 and scheduler.last_epoch < found.state["last_epoch"]:
            self._say_scheduler(self._placed(found, params), scheduler)
        self._watch()

    def _say_scheduler(self, saved: Saved, scheduler: LRScheduler) -> None:
        part = (
            f"{'has' if saved.beside else 'holds'} a learning-rate scheduler's state "
            f"({saved.key}, at its step {saved.state['last_epoch']})",
            f"the {type(scheduler).__name__} stepping it",
            self._from_pretrained(saved) or "no scheduler.load_state_dict call",
            "its schedule starts over, the rate back at its first step's",
        )
        evidence = {
            "scheduler_key": saved.key,
            "scheduler_step_in_checkpoint": saved.state["last_epoch"],
        }
        self._say(saved.where, f"scheduler {saved.key}", part, evidence)

    def _from_pretrained(self, saved: Saved) -> str:
        """How a state beside a ``from_pretrained`` model's weights was left: "" for others."""
        if os.path.dirname(saved.beside) not in self.pretrained_folders:
            return ""
        return (
            "from_pretrained reads the folder's weights alone; the Trainer reads the rest "
            "given trainer.train(resume_from_checkpoint=...)"
        )

    def _placed(self, saved: Saved, params: list[torch.Tensor]) -> Saved:
        """A state found beside the weights, said at the load of the weights it trains (a
        GAN's ``optD.pt`` at ``D.pt``'s, not at ``G.pt``'s, which looked into the folder)."""
        if not saved.beside:
            return saved
        ids = {id(p) for p in params}
        for module, (where, _) in self.modules.items():
            if where and any(id(p) in ids for p in module.parameters()):
                return saved._replace(where=where)
        return saved

    def _watch(self) -> None:
        self.watching = bool(self.saved or self.claimed or self.unmatched) or (
            bool(self.schedulers) and not self.trained
        )

    def _from_its_folder(self, saved: Saved, params: list[torch.Tensor]) -> bool:
        """A state found beside some weights is matched to an optimiser only where half its
        parameters' values or more came from that folder: a model read from a checkpoint
        folder to be evaluated or to teach, and another trained from a folder of weights
        alone, is no resume of the first's training."""
        if not saved.beside:
            return True
        folder = os.path.dirname(saved.beside)
        ids = {id(p) for m, (_, f) in self.modules.items() if f == folder for p in m.parameters()}
        total = sum(p.numel() for p in params)
        return total > 0 and 2 * sum(p.numel() for p in params if id(p) in ids) >= total

    def _resumed(self, params: list[torch.Tensor]) -> bool:
        """Half the parameters' values or more belong to modules loaded from a checkpoint (a
        temperature kept as a bare parameter beside the model is restored some other way), and
        none is one a load left out (a head of its own, fine-tuned with the loaded body)."""
        if any(self.left_out.get(id(p)) is p for p in params):
            return False
        loaded = {id(p) for m in self.modules.keys() for p in m.parameters()}
        total = sum(p.numel() for p in params)
        return total > 0 and 2 * sum(p.numel() for p in params if id(p) in loaded) >= total

    def _say_optimiser(
        self,
        saved: Saved,
        optimizer: torch.optim.Optimizer,
        params: int,
        step: int,
        why: str = "",
    ) -> None:
        """``why``: how it started afresh, where it was no missing ``load_state_dict``."""
        where, key, state, beside = saved
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
            why or "no optimizer.load_state_dict call",
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
        whys = "; ".join(dict.fromkeys(p[2] for p in parts))
        follows = "; ".join(dict.fromkeys(p[3] for p in parts))  # (a SequentialLR's two: one)
        found = Finding(
            "optimiser-state-not-loaded",
            "warning",
            f"the checkpoint loaded here {held} for parameters whose weights were loaded "
            f"from a checkpoint, but {who} started afresh ({whys}): " + follows,
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


def _unwrapped(optimizer: Any) -> Any:
    """The optimiser that steps: accelerate's ``AcceleratedOptimizer`` (which the transformers
    ``Trainer``'s scheduler is built over) holds it as ``.optimizer``."""
    inner = getattr(optimizer, "optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer


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
    into. A ``SequentialLR``'s (or ``ChainedScheduler``'s) schedulers are at its own level."""
    yield key or "the whole file", obj
    inner = obj.get("_schedulers") if isinstance(obj, dict) else None
    if isinstance(inner, list):
        for i, value in enumerate(inner[:ITEMS]):
            yield from _nodes(value, f"scheduler {i} {key}".strip(), depth)
    elif depth > 0 and not _is_state(obj):
        for where, value in _entries(obj, key):
            yield from _nodes(value, where, depth - 1)


def _names(folder: str) -> list[str]:
    """The names of the first ``FOLDER_ENTRIES`` files of ``folder`` named for a state."""
    try:
        with os.scandir(folder) as entries:
            first = itertools.islice(entries, FOLDER_ENTRIES)
            return sorted(e.name for e in first if STATE_FILE.search(e.name) and e.is_file())
    except OSError:
        return []


def _own_empty_state(optimizer: torch.optim.Optimizer, state: Any) -> bool:
    """``state`` keeps nothing and its groups' settings are the optimiser's own: a reload
    that restores nothing."""
    if not isinstance(state, dict) or state.get("state") or "param_groups" not in state:
        return False
    try:
        settings = [{k: v for k, v in g.items() if k != "params"} for g in state["param_groups"]]
        own = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        return bool(settings == own)
    except (RuntimeError, TypeError):  # tensors of several values compared
        return False


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
    each saved moment (a tensor of one dimension or more) shaped as its parameter and kept
    under the names this optimiser keeps its own (once it has stepped), looked at for the first
    and last ``SHAPES_LOOKED_AT`` parameters."""
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
        own = optimizer.state.get(params[at])
        if own and set(own) != set(state):  # another optimiser's kind: Adam's moments, SGD's
            return False
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
