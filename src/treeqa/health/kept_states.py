"""``state-dict-not-copied``: a ``state_dict()`` kept as a snapshot without a copy. Its tensors
are the parameters' memory, so they follow the weights as training goes on: early stopping's
``best = model.state_dict()`` (or ``dict(...)``, ``{k: v for ...}``, ``{k: v.detach() ...}``,
``{k: v.cpu() ...}`` on a CPU) keeps nothing of the best epoch. Restored with
``model.load_state_dict(best)``, it loads the weights the model has now and changes nothing;
loaded into another model (a fold's best, kept for an ensemble) or saved with
``torch.save(best, path)`` after more steps, it gives the last weights.

Where a dict is loaded (``load_state_dict``) or saved (``torch.save``, or one level into what
it saves: a checkpoint ``{"model": ...}`` kept in memory, a tuple), it is traced to the latest
``state_dict()`` call whose first tensor it holds first (a shallow copy keeps them), or else
whose first tensor's memory it holds first (``{k: v.detach() ...}``), and named where half the
tensors read at that call hold other values now (optimiser updates, running statistics, writes
through ``.data``): loaded into its own model, into another, or saved (doctor only). A load of
the module's own tensors (every parameter it names in the same memory) that no call traces is
named after the run's first step (before it, such a load restores nothing that was trained). A
dict loaded or saved with the values it was taken with (a target network's sync, a checkpoint
each epoch, a load back right after an evaluation, a frozen part an optimiser steps by zero) is
not named.

``state_dict()`` calls are seen through ``loaded.py``'s wrapper (the outermost call, not the
ones it makes for the submodules): the first tensor (weakly) and its memory, a few values of
the first floating tensors (gathered on their device), the module's class, the run's step and
the line, for the last ``KEPT`` calls.
"""

from __future__ import annotations

import collections
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

import torch
from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding

KEPT = 32
"""``state_dict()`` calls remembered: a best epoch's, kept among checkpoints saved since."""
TENSORS, VALUES = 8, 16
"""Floating tensors of a ``state_dict()`` read when it is taken, and values of each (evenly
spaced): compared with the same places when it is loaded or saved."""
ROUNDING = 1e-6
"""A value moved when it differs by more than this part of its magnitude (or of the tensor's
mean magnitude)."""
HERE = str(Path(__file__).parent)
_STATE_DICT = nn.Module.state_dict.__code__
"""The code of ``Module.state_dict``, which calls itself for each submodule."""


class Taken(NamedTuple):
    """One ``state_dict()`` call: its first tensor (weakly) and that tensor's memory, a few
    values of its first floating tensors (name, positions, values), the module's class, the
    run's step, the line."""

    first: weakref.ref[torch.Tensor]
    pointer: tuple[int, int]
    read: list[tuple[str, torch.Tensor, torch.Tensor]]
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
        made; the calls it makes for the submodules are passed over): a few of its values are
        gathered on their device."""
        if self.said or not isinstance(result, dict) or _nested():
            return
        first = _first_tensor(result)
        if first is not None:
            self.taken_calls.append(
                Taken(
                    weakref.ref(first),
                    _pointer(first),
                    _read(result),
                    type(module).__name__,
                    self.steps(),
                    sites.user_site(),
                )
            )

    def loading(self, module: nn.Module, state_dict: dict[Any, Any]) -> bool:
        """``module.load_state_dict(state_dict)``: whether ``state_dict`` is the module's own
        tensors (said after the run's first step, unless taken by a ``state_dict()`` call
        whose values are unchanged since: a load right after it), or another's that changed
        since it was taken (said)."""
        own = _own_tensors(module, state_dict)
        if self.said or (own and not self.steps()):
            return own
        taken = self._taken(state_dict)
        moved = taken is not None and _moved(state_dict, taken)
        if own and (taken is None or moved):
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
        elif taken is not None and moved:
            self._say(
                f"load_state_dict into the {type(module).__name__} was given a state_dict() of "
                f"the {taken.kind} taken at step {taken.step} ({taken.where}) without a copy: "
                "its tensors are the parameters' memory, which the steps since have changed, "
                "so the weights loaded are those last written (the run is at step "
                f"{self.steps()}), not those it was kept for",
                state_dict,
                taken,
            )
        return own

    def saving(self, obj: Any) -> None:
        """``torch.save(obj, ...)`` is about to write: a dict a ``state_dict()`` call made
        (``obj``, or one level into it), changed since, is saved as it is now."""
        if self.said or not self.taken_calls:
            return
        inner = (
            obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list | tuple) else ()
        )
        for state in [obj, *inner]:
            taken = self._taken(state) if isinstance(state, dict) else None
            if taken is not None and _moved(state, taken):
                self._say(
                    f"torch.save wrote a state_dict() of the {taken.kind} taken at step "
                    f"{taken.step} ({taken.where}) without a copy: its tensors are the "
                    "parameters' memory, which the steps since have changed, so the file holds "
                    f"the weights last written (the run is at step {self.steps()}), not those "
                    "it was kept for",
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
        """The latest ``state_dict()`` call whose first tensor ``state`` holds first; else the
        latest whose first tensor's memory it holds first (``{k: v.detach() ...}``)."""
        first = _first_tensor(state)
        if first is None:
            return None
        calls = list(reversed(self.taken_calls))
        same = next((t for t in calls if t.first() is first), None)
        return same or next((t for t in calls if t.pointer == _pointer(first)), None)


def _own_tensors(module: nn.Module, state_dict: dict[Any, Any]) -> bool:
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


def _pointer(tensor: torch.Tensor) -> tuple[int, int]:
    """Where a tensor's values are: its first value's address and how many (0, 0 for one
    without memory of its own to read)."""
    if tensor.layout != torch.strided or tensor.device.type == "meta":
        return 0, 0
    return tensor.data_ptr(), tensor.numel()


def _readable(tensor: Any) -> TypeGuard[torch.Tensor]:
    return (
        isinstance(tensor, torch.Tensor)
        and tensor.is_floating_point()
        and tensor.layout == torch.strided
        and tensor.device.type != "meta"
        and tensor.numel() > 0
        and tensor.is_contiguous()
    )


def _read(state: dict[Any, Any]) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, positions, values) of ``VALUES`` evenly spaced values of each of the first
    ``TENSORS`` floating tensors of ``state``, gathered on their device (no host read: an
    average updated from ``state_dict()`` at every step waits for nothing)."""
    picks = []
    for name in [k for k, v in state.items() if _readable(v)][:TENSORS]:
        flat = state[name].detach().view(-1)
        positions = torch.linspace(0, flat.numel() - 1, min(VALUES, flat.numel())).long()
        picks.append((name, positions, flat[positions.to(flat.device)].float()))
    return picks


def _moved(state: dict[Any, Any], taken: Taken) -> bool:
    """Whether half the tensors read when ``taken`` was made hold other values in ``state``
    now (a frozen part an optimiser steps by zero is unchanged): one host read."""
    changed = []
    for name, positions, values in taken.read:
        tensor = state.get(name)
        if not _readable(tensor) or tensor.numel() <= int(positions[-1]):
            continue
        now = tensor.detach().view(-1)[positions.to(tensor.device)].float().to(values.device)
        scale = values.abs().mean() + 1e-12
        off = (now - values).abs() > ROUNDING * torch.maximum(values.abs(), scale)
        changed.append(off.any())
    if not changed:
        return False
    device = changed[0].device
    return int(torch.stack([c.to(device) for c in changed]).sum()) * 2 >= len(changed)
