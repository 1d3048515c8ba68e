"""``optimiser-state-not-loaded``: a run resumed from a checkpoint that holds its optimiser's
state, with the optimiser started afresh.

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
"""

from __future__ import annotations

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

    def checkpoint(self, loaded: Any) -> None:
        """``torch.load`` returned ``loaded``."""
        found = next(_optimiser_states(loaded, "", DEPTH), None)
        if found is not None and not self.reported:
            self.pending = (sites.user_site(), *found)
            self.modules = weakref.WeakSet()

    def module_loaded(self, module: nn.Module) -> None:
        if self.pending is not None:
            self.modules.add(module)

    def optimiser_loaded(self) -> None:
        self.pending = None

    def stepped(self, optimizer: torch.optim.Optimizer, step: int) -> None:
        """An optimiser step (the run's ``step``) ended: the first after a pending checkpoint
        is judged."""
        pending, self.pending = self.pending, None
        if pending is None or isinstance(optimizer, torch.optim.LBFGS):
            return
        where, key, saved = pending
        params = [p for group in optimizer.param_groups for p in group["params"]]
        loaded = {id(p) for m in self.modules for p in m.parameters()}
        if not params or any(id(p) not in loaded for p in params):
            return
        if not _laid_out_as(saved, optimizer):
            return
        self.reported = True
        steps = steps_taken(saved)
        self.add(
            Finding(
                "optimiser-state-not-loaded",
                "warning",
                f"the checkpoint loaded here holds an optimiser's state ({key}"
                + (f", {steps} steps taken" if steps else "")
                + ") for these very parameters, and the model's weights were loaded from it, "
                f"but the {type(optimizer).__name__} training them started afresh (no "
                "optimizer.load_state_dict call): its moments and step count restart at zero, "
                "so the first updates after the resume are as large as at the start of training",
                where=where,
                step=step,
                evidence={
                    "key": key,
                    "steps_in_checkpoint": steps,
                    "parameters": len(params),
                },
            )
        )


def _optimiser_states(obj: Any, key: str, depth: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where it is, e.g. "under 'optimizer'", the state) of each optimiser state with
    state kept, in ``obj`` and ``depth`` levels of dict values and list items below it."""
    if _is_optimiser_state(obj):
        yield key or "the whole file", obj
        return
    if depth == 0:
        return
    if isinstance(obj, dict):
        items = [(f"under {k!r}", v) for k, v in obj.items() if isinstance(k, str | int)]
    elif isinstance(obj, list | tuple):
        items = [
            (f"{key[:-1]}, item {i})" if key else f" (item {i})", v) for i, v in enumerate(obj)
        ]
    else:
        return
    for where, value in items:
        yield from _optimiser_states(value, where, depth - 1)


def _is_optimiser_state(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("state"), dict)
        and bool(obj["state"])
        and isinstance(obj.get("param_groups"), list)
        and all(isinstance(g, dict) and "params" in g for g in obj["param_groups"])
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
