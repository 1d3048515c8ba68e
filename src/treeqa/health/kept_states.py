"""``state-dict-not-copied``: a ``state_dict()`` kept as a snapshot without a copy. Its tensors
are the parameters' memory, so they follow the weights as training goes on: early stopping's
``best = model.state_dict()`` (or ``dict(...)``, ``{k: v for ...}``, ``{k: v.detach() ...}``,
``{k: v.cpu() ...}`` on a CPU) keeps nothing of the best epoch. Restored with
``model.load_state_dict(best)``, it loads the weights the model has now and changes nothing;
loaded into another model (a fold's best, kept for an ensemble) or saved with
``torch.save(best, path)`` after more steps, it gives the last weights.

Two places tell it (doctor only):

- ``load_state_dict`` given the module's own tensors (every parameter it names in the same
  memory), after the run's first step (before it, such a load restores nothing that was
  trained, and harms nothing).
- ``load_state_dict`` into another module, or ``torch.save``, of a dict (or of a dict's value:
  a checkpoint ``{"model": ...}`` kept in memory) that a ``state_dict()`` call made: its first
  tensor is one that call returned (a shallow copy keeps them), and its tensors were written
  since (their version counters, which a ``state_dict()``'s tensors share with the parameters,
  moved: optimiser updates, running statistics). A dict loaded or saved as it was taken (a
  target network's sync, a checkpoint each epoch) is not named.

``state_dict()`` calls are seen through ``loaded.py``'s wrapper (the outermost call, not the
ones it makes for the submodules): the first tensor (weakly), the sum of the tensors' version
counters, the module's class, the run's step and the line, for the last ``KEPT`` calls.
"""

from __future__ import annotations

import collections
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding

KEPT = 32
"""``state_dict()`` calls remembered: a best epoch's, kept among checkpoints saved since."""
HERE = str(Path(__file__).parent)
_STATE_DICT = nn.Module.state_dict.__code__
"""The code of ``Module.state_dict``, which calls itself for each submodule."""


class Taken(NamedTuple):
    """One ``state_dict()`` call: its first tensor (weakly), its tensors' version counters
    added up, the module's class, the run's step, the line."""

    first: weakref.ref[torch.Tensor]
    versions: int
    kind: str
    step: int
    where: str


class KeptStates:
    """``add``: where findings go; ``steps()``: the optimiser steps of the run so far."""

    def __init__(self, add: Callable[[Finding], None], steps: Callable[[], int]) -> None:
        self.add, self.steps = add, steps
        self.taken_calls: collections.deque[Taken] = collections.deque(maxlen=KEPT)
        self.said = False

    def taken(self, module: nn.Module, result: Any) -> None:
        """``module.state_dict()`` returned ``result`` (the script's call, or one a framework
        made; the calls it makes for the submodules are passed over)."""
        if self.said or not isinstance(result, dict) or _nested():
            return
        first = _first_tensor(result)
        if first is not None:
            versions = _versions(result)
            kind = type(module).__name__
            self.taken_calls.append(
                Taken(weakref.ref(first), versions, kind, self.steps(), sites.user_site())
            )

    def loading(self, module: nn.Module, state_dict: dict[Any, Any]) -> bool:
        """``module.load_state_dict(state_dict)``: whether ``state_dict`` is the module's own
        tensors (said after the run's first step), or another's written since it was taken
        (said)."""
        own = own_tensors(module, state_dict)
        if self.said or (own and not self.steps()):
            return own
        taken = self._taken(state_dict)
        if own:
            when = f" (taken at step {taken.step}, {taken.where})" if taken else ""
            self._say(
                f"load_state_dict was given the {type(module).__name__}'s own tensors "
                f"({len(state_dict)} keys){when}: a state_dict() kept without a copy holds the "
                "parameters' memory and follows them as they train, so 'restoring' it loads "
                f"the weights the model has now (step {self.steps()}) and changes nothing: the "
                "weights it was kept for are lost",
                state_dict,
                taken,
            )
        elif taken is not None and _versions(state_dict) > taken.versions:
            self._say(
                f"load_state_dict into the {type(module).__name__} was given a state_dict() of "
                f"the {taken.kind} taken at step {taken.step} ({taken.where}) without a copy: "
                f"{_written(state_dict, taken)}, so the weights loaded are those last written "
                f"(the run is at step {self.steps()}), not those it was kept for",
                state_dict,
                taken,
            )
        return own

    def saving(self, obj: Any) -> None:
        """``torch.save(obj, ...)`` is about to write: a dict a ``state_dict()`` call made,
        written since, is saved as it is now."""
        if self.said or not self.taken_calls:
            return
        for state in [obj, *obj.values()] if isinstance(obj, dict) else []:
            taken = self._taken(state) if isinstance(state, dict) else None
            if taken is not None and _versions(state) > taken.versions:
                self._say(
                    f"torch.save wrote a state_dict() of the {taken.kind} taken at step "
                    f"{taken.step} ({taken.where}) without a copy: {_written(state, taken)}, so "
                    f"the file holds the weights last written (the run is at step "
                    f"{self.steps()}), not those it was kept for",
                    state,
                    taken,
                )
                return

    def _say(self, message: str, state: dict[Any, Any], taken: Taken | None) -> None:
        self.said = True
        self.add(
            Finding(
                "state-dict-not-copied",
                "error",
                message,
                where=sites.user_site(),
                evidence={
                    "keys": len(state),
                    "taken_at_step": taken.step if taken else None,
                    "taken_at": taken.where if taken else "",
                    "step": self.steps(),
                },
            )
        )

    def _taken(self, state: dict[Any, Any]) -> Taken | None:
        """The latest ``state_dict()`` call whose first tensor ``state`` holds first."""
        first = _first_tensor(state)
        if first is None:
            return None
        return next((t for t in reversed(self.taken_calls) if t.first() is first), None)


def own_tensors(module: nn.Module, state_dict: dict[Any, Any]) -> bool:
    """Every parameter ``state_dict`` names is the module's own, in the same memory: a
    ``state_dict()`` kept without a copy (its tensors are the parameters' memory, and follow
    them as they train)."""
    shared = 0
    for name, p in module.named_parameters():
        given = state_dict.get(name)
        if not isinstance(given, torch.Tensor) or given.layout != torch.strided:
            continue
        if given.data_ptr() != p.data_ptr() or given.shape != p.shape or p.numel() == 0:
            return False
        shared += 1
    return shared > 0


def _nested() -> bool:
    """Whether the wrapped ``state_dict`` was called by ``Module.state_dict`` itself (for a
    submodule), past this package's frames."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(HERE):
        frame = frame.f_back  # type: ignore[assignment]
    return frame is not None and frame.f_code is _STATE_DICT


def _first_tensor(state: dict[Any, Any]) -> torch.Tensor | None:
    return next((v for v in state.values() if isinstance(v, torch.Tensor)), None)


def _versions(state: dict[Any, Any]) -> int:
    """The version counters of ``state``'s tensors added up: each in-place write to them (or
    to the parameters they are taken from) adds one."""
    return sum(v._version for v in state.values() if isinstance(v, torch.Tensor))


def _written(state: dict[Any, Any], taken: Taken) -> str:
    tensors = sum(isinstance(v, torch.Tensor) for v in state.values())
    writes = (_versions(state) - taken.versions) / max(tensors, 1)
    return (
        f"its tensors are the parameters' memory, written since (its {tensors} tensors about "
        f"{writes:,.0f} times each: optimiser updates)"
    )
