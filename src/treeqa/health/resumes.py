"""``optimiser-state-not-loaded``: a run resumed from a checkpoint that holds its optimiser's
state (or its learning-rate scheduler's), with the optimiser (or the scheduler) started afresh.

A checkpoint saved as ``{"model": model.state_dict(), "optimizer": optimizer.state_dict(),
...}`` and loaded with ``model.load_state_dict(ckpt["model"])`` alone resumes the weights but
not Adam's moments or step count: the first updates after the resume are as large as at the
start of training (its bias correction at step 1 with moments at zero), and the loss jumps.

What ``torch.load`` returns is looked through (the object, the values of a dict and the items
of a list, two levels down) for optimiser states (``{"state": ..., "param_groups": [...]}``)
whose ``state`` is not empty (plain SGD keeps none: a fresh one is the same). At the first
optimiser step after such a load, where no ``Optimizer.load_state_dict`` was called since, the
optimiser's parameters were loaded by a module's ``load_state_dict`` since (a teacher loaded from
a checkpoint of its own trains nothing) and are laid out as the saved state's (as many
parameters in each group, the saved moments shaped as these parameters), it is the finding, at
the ``torch.load`` line. A fine-tuning with a new head or another optimiser's grouping is laid
out otherwise and is not judged; a fine-tuning of the very same model with a new optimiser on
purpose reads as this.

A scheduler's state (``last_epoch``, ``_step_count``, ``base_lrs``) past its first step is
judged at the first scheduler step after the load (not its constructor's): a scheduler of that
kind (the saved keys all its attributes, as many base rates) over an optimiser of the loaded
modules' parameters, at its step 0 where the saved one was further on, started afresh: its
schedule starts over (a warm-up and the peak rate again). Read from its state, so a
``load_state_dict`` of a class's own is seen as well.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding

DEPTH = 2
"""Levels of a loaded checkpoint looked through for optimiser states (Lightning keeps them in a
list under ``optimizer_states``)."""
ITEMS = 256
"""Entries of each dict or list of a loaded checkpoint looked at: a checkpoint's are few, and a
dataset saved as a list of a million samples is no checkpoint to walk."""
SHAPES_LOOKED_AT = 8
"""Parameters at each end of the optimiser whose saved moments' shapes are compared."""


class Resumes:
    """Fed by the loss checks' wrappers of ``torch.load`` and ``nn.Module.load_state_dict`` and
    by the doctor's of ``Optimizer.load_state_dict`` and the optimiser's step."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        # (the torch.load line, the key path, the saved state) of the latest checkpoint with
        # an optimiser state, while no optimiser has loaded a state since
        self.pending: tuple[str, str, dict[str, Any]] | None = None
        self.modules: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # loaded since
        self.reported = False
        # (the torch.load line, the key path, the saved state) of a scheduler's, likewise
        self.scheduler: tuple[str, str, dict[str, Any]] | None = None
        self.scheduler_reported = False
        # what was said of each torch.load line: "optimiser" / "scheduler" -> (part, evidence)
        self.said: dict[str, dict[str, tuple[tuple[str, str, str, str], dict[str, Any]]]] = {}

    def checkpoint(self, loaded: Any) -> None:
        """``torch.load`` returned ``loaded``."""
        found = next(_states(loaded, "", DEPTH, _is_optimiser_state), None)
        scheduler = next(_states(loaded, "", DEPTH, _is_scheduler_state), None)
        if found is not None and not self.reported:
            self.pending = (sites.user_site(), *found)
        if scheduler is not None and not self.scheduler_reported:
            self.scheduler = (sites.user_site(), *scheduler)
        if found is not None or scheduler is not None:
            self.modules = weakref.WeakSet()
            # A whole model saved with torch.save(model) comes back loaded, with no call.
            values = loaded.values() if isinstance(loaded, dict) else (loaded,)
            self.modules.update(v for v in values if isinstance(v, nn.Module))

    def module_loaded(self, module: nn.Module) -> None:
        if self.pending is not None or self.scheduler is not None:
            self.modules.add(module)

    def _of_loaded_modules(self, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        """The optimiser's parameters where every one belongs to a module loaded since the
        checkpoint; none otherwise."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        loaded = {id(p) for m in self.modules for p in m.parameters()}
        return [] if any(id(p) not in loaded for p in params) else params

    def scheduler_stepped(self, scheduler: Any) -> None:
        """A learning-rate scheduler's ``step`` starts (``last_epoch`` before it)."""
        pending = self.scheduler
        if pending is None or scheduler.last_epoch < 0:  # (its constructor's step)
            return
        self.scheduler = None
        where, key, saved = pending
        fresh = scheduler.last_epoch == 0 < saved["last_epoch"]
        kind = all(k in vars(scheduler) for k in saved)
        if not fresh or not kind or len(saved["base_lrs"]) != len(scheduler.base_lrs):
            return
        if not self._of_loaded_modules(scheduler.optimizer):
            return
        self.scheduler_reported = True
        part = (
            f"a learning-rate scheduler's state ({key}, at its step {saved['last_epoch']})",
            f"the {type(scheduler).__name__} stepping it",
            "scheduler",
            "the schedule starts over from its first step (a warm-up and the peak rate again)",
        )
        evidence = {"scheduler_key": key, "scheduler_step_in_checkpoint": saved["last_epoch"]}
        self._say(where, "scheduler", part, evidence)

    def optimiser_loaded(self) -> None:
        self.pending = None

    def stepped(self, optimizer: torch.optim.Optimizer, step: int) -> None:
        """An optimiser step (the run's ``step``) ended: the first after a pending checkpoint
        is judged."""
        pending, self.pending = self.pending, None
        if pending is None or isinstance(optimizer, torch.optim.LBFGS):
            return
        where, key, saved = pending
        params = self._of_loaded_modules(optimizer)
        if not params or not _laid_out_as(saved, optimizer):
            return
        self.reported = True
        steps = steps_taken(saved)
        part = (
            f"an optimiser's state ({key}" + (f", {steps} steps taken)" if steps else ")"),
            f"the {type(optimizer).__name__} training them",
            "optimizer",
            "its moments and step count restart at zero, so the first updates after the "
            "resume are as large as at the start of training",
        )
        evidence = {"key": key, "steps_in_checkpoint": steps, "parameters": len(params)}
        self._say(where, "optimiser", part, evidence, step)

    def _say(
        self,
        where: str,
        what: str,
        part: tuple[str, str, str, str],
        evidence: dict[str, Any],
        step: int = 0,
    ) -> None:
        """The finding of ``torch.load`` at ``where``: an optimiser's state left unloaded, a
        scheduler's, or both (said again as one when the second is found)."""
        said = self.said.setdefault(where, {})
        said[what] = (part, evidence)
        parts = [said[k][0] for k in ("optimiser", "scheduler") if k in said]
        held, who = (" and ".join(p[i] for p in parts) for i in range(2))
        calls = " or ".join(f"{p[2]}.load_state_dict" for p in parts)
        then = "; ".join(p[3] for p in parts)
        found = Finding(
            "optimiser-state-not-loaded",
            "warning",
            f"the checkpoint loaded here holds {held} for these very parameters, and the "
            f"model's weights were loaded from it, but {who} started afresh (no {calls} "
            f"call): {then}",
            where=where,
            step=step,
            evidence={k: v for _, e in said.values() for k, v in e.items()},
        )
        self.add(found)


def _states(
    obj: Any, key: str, depth: int, kind: Callable[[Any], bool]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where it is, e.g. "under 'optimizer'", the state) of each state of a ``kind`` in
    ``obj`` and ``depth`` levels of dict values and list items below it."""
    if kind(obj):
        yield key or "the whole file", obj
        return
    if depth == 0:
        return
    if isinstance(obj, dict):
        kept = itertools.islice(obj.items(), ITEMS)
        items = [(f"under {k!r}", v) for k, v in kept if isinstance(k, str | int)]
    elif isinstance(obj, list | tuple):
        items = [(f"item {i}" + (f" {key}" if key else ""), v) for i, v in enumerate(obj[:ITEMS])]
    else:
        return
    for where, value in items:
        yield from _states(value, where, depth - 1, kind)


def _is_optimiser_state(obj: Any) -> bool:
    """An optimiser's ``state_dict`` with state kept (plain SGD keeps none)."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("state"), dict)
        and bool(obj["state"])
        and isinstance(obj.get("param_groups"), list)
        and all(isinstance(g, dict) and "params" in g for g in obj["param_groups"])
    )


def _is_scheduler_state(obj: Any) -> bool:
    """A learning-rate scheduler's ``state_dict`` past its first step."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("last_epoch"), int)
        and obj["last_epoch"] > 0
        and "_step_count" in obj
        and isinstance(obj.get("base_lrs"), list)
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
