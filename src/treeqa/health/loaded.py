"""``loaded-weights-not-trained``: weights loaded before training that training does not start
from.

Two forms, both silent: the run trains, from weights of no checkpoint.

- Written over: ``model.load_state_dict(torch.load(path))`` and then ``model.apply(init_weights)``
  (or ``reset_parameters()``, an init loop over ``model.parameters()``), the two in the wrong
  order: every loaded tensor is initialised again before the first step.
- Loaded into another instance: ``model.load_state_dict(...)`` and then ``model = Net()``
  built again before the optimiser, or ``pretrained.load_state_dict(...)`` beside a ``net``
  that the loop trains: the loaded model never runs.

Each module a ``load_state_dict`` loaded (or ``torch.load`` returned whole) has a few values of
each of its parameters kept (``SAMPLED``, evenly spaced), with the line of the load. At each of
the first ``WAITS`` steps of an optimiser over some of them (a pre-hook, there while a load
waits), those values are read again: a tensor whose values moved (``MOVED`` of them by more
than rounding: a cast to half precision is no change) and no longer correlate with the loaded
ones (a few optimiser steps, or weights shrunk and perturbed on purpose, keep them in line) was
written over. Half the loaded values written over, in one of the first half of the model's
tensors or more, make the finding, at the line that wrote the first of them where it was an
``nn.init`` function (wrapped for the run; ``.data.normal_()`` is not seen). Re-initialising a
head, the model's last layers, is fine, whatever their size; so is a parametrisation
registered after the load (its ``original`` is not the weight).

Loads before the run's first step whose parameters the first optimiser does not step are held:
where the optimiser steps a tensor of each of the loaded model's shapes (in order within each
shape), half of them with other values, and the loaded model never runs a forward to the
script's end (a forward pre-hook on it, removed at its first call) nor has its ``state_dict()``
read (its tensors copied into another model by hand, or averaged into one), the finding is
made at the end. A model loaded to compare with the one trained runs (a teacher, a reference
model, a baseline scored at the end).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeGuard

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from treeqa.health import checks, hooks, sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_calls_and_results, note_function_calls

SAMPLED = 64
"""Values of each loaded tensor kept to compare (evenly spaced over it)."""
WAITS = 4
"""Optimiser steps a load waits for one over its parameters (a GAN's other optimiser steps
between; a target network loaded now and then, never stepped, is let go)."""
MOVED = 0.5
"""Share of a tensor's kept values that moved for it to count as written over, and share of
the loaded tensors (and of their values) written over for the finding."""
ROUNDING = 1e-2
"""A value moved when it differs by more than this part of itself, or of the tensor's mean
magnitude: a cast to bfloat16 rounds by at most 2**-8."""
CORRELATED = 0.5
"""Correlation with the loaded values at or above which moved values are the loaded ones
changed (scaled, perturbed), not written over."""
INITS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
)
"""The ``torch.nn.init`` functions wrapped to name the line that wrote over a loaded tensor."""


class Kept(NamedTuple):
    """A loaded parameter: itself (weakly), its shape, the positions kept and their values as
    loaded."""

    param: weakref.ref[torch.Tensor]
    shape: tuple[int, ...]
    positions: torch.Tensor
    values: torch.Tensor


class Load(NamedTuple):
    """One load: the module (weakly), the line, its parameters kept, in order, ``ran``:
    whether the module ran a forward (or had its state_dict read) since, and the handle of the
    forward pre-hook that sets it, and the optimiser steps it waits for yet (a one-element
    list)."""

    module: weakref.ref[nn.Module]
    where: str
    kept: list[Kept]
    ran: list[Any]
    waits: list[int]


class LoadedWeights:
    """Fed by the loss checks' wrappers of ``load_state_dict`` and ``torch.load``
    (``loaded``); ``add``: where findings go."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.wrappers = Wrappers()
        self.loads: list[Load] = []  # loads none of whose parameters an optimiser has stepped
        self.early: list[Load] = []  # loads before the first step that it did not step
        self.stepped = False  # an optimiser has stepped
        self.written: dict[int, str] = {}  # a loaded tensor's data_ptr -> the nn.init call's line
        self.handle: Any = None  # the optimisers' step pre-hook, while a load waits
        self.said = False
        self.read_too: Callable[[nn.Module], None] | None = None  # told of state_dict() too
        self.taken_too: Callable[[nn.Module, Any], None] | None = None  # and of what it returned

    def install(self) -> None:
        for name in INITS:
            self.wrappers.add(
                note_function_calls(nn.init, name, self._initialised, label=f"nn.init.{name}")
            )
        # A loaded model whose state_dict() is read is used (its tensors copied by hand into
        # another model, or averaged into one), as one that runs is.
        self.wrappers.add(
            note_calls_and_results(nn.Module, "state_dict", self._read, self._returned)
        )

    def uninstall(self) -> None:
        self.wrappers.undo()
        for handle in [self.handle, *(load.ran[1] for load in self.loads + self.early)]:
            if handle is not None:
                handle.remove()
        self.handle = None

    def loaded(self, module: nn.Module, where: str) -> None:
        """``module`` holds weights just loaded (at ``where``): an earlier load's kept values
        of the same tensors are dropped."""
        kept = _kept([p for p in module.parameters() if p.requires_grad and _plain(p)])
        if not kept or self.said:
            return
        ids = {id(k.param()) for k in kept}
        loads = []
        for load in self.loads:
            load.kept[:] = [k for k in load.kept if id(k.param()) not in ids]
            if load.kept:
                loads.append(load)
            else:
                load.ran[1].remove()
        ran: list[Any] = [False, None]  # (a ModelHook: left out of a pickle of the module)
        ran[1] = module.register_forward_pre_hook(hooks.ModelHook(_ran, ran))
        self.loads = [*loads, Load(weakref.ref(module), where, kept, ran, [WAITS])]
        pointers = _pointers(kept)
        self.written = {k: v for k, v in self.written.items() if k not in pointers}
        if self.handle is None:
            self.handle = register_optimizer_step_pre_hook(self._stepping)

    def _read(self, module: nn.Module, *_: Any, **__: Any) -> None:
        """``module.state_dict()`` is called (for each of its submodules too)."""
        if self.read_too is not None:
            self.read_too(module)
        for load in (*self.loads, *self.early):
            if load.module() is module:
                load.ran[0] = True

    def _returned(self, module: nn.Module, result: Any) -> None:
        """``module.state_dict()`` returned ``result``."""
        if self.taken_too is not None:
            self.taken_too(module, result)

    def _initialised(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``nn.init.<name>(tensor, ...)``: the line, where it writes over a loaded tensor."""
        tensor = args[0] if args else kwargs.get("tensor")
        if not self.loads or not _plain(tensor):
            return
        pointer = tensor.data_ptr()  # (m.weight.data is another tensor over the same memory)
        if pointer not in self.written and any(
            pointer in _pointers(load.kept) for load in self.loads
        ):
            self.written[pointer] = f"{sites.user_site()} ({name})"

    def _stepping(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """An optimiser's step is about to update its parameters: the loads among them are
        read against what was loaded, at each of the first ``WAITS`` steps after the load (an
        init run in the loop's first iteration, after its step, is read at the second)."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        ids = {id(p) for p in params}
        waiting = []
        for load in self.loads:
            mine = [k for k in load.kept if id(k.param()) in ids]
            load.waits[0] -= 1
            if mine:
                self._judge(load, mine, optimizer)
            elif not self.stepped and self._elsewhere(load, params):
                self.early.append(load)
                continue
            if load.waits[0] > 0 and not self.said:
                waiting.append(load)
            else:
                load.ran[1].remove()
        self.loads, self.stepped = waiting, True
        if not self.loads and self.handle is not None:
            self.handle.remove()
            self.handle = None

    def _judge(self, load: Load, mine: list[Kept], optimizer: torch.optim.Optimizer) -> None:
        """Half the values of the loaded tensors ``optimizer`` steps written over, one of the
        first half of the model's tensors among them (a head re-initialised on purpose is its
        last layers, whatever their size)."""
        mine = [k for k in mine if id(k.param()) not in _parametrized(load.module())]
        moved = [k for k in mine if _moved(k)]
        values = sum(_numel(k) for k in mine)
        over = sum(_numel(k) for k in moved)
        first = {id(k.param()) for k in load.kept[: max(1, len(load.kept) // 2)]}
        if self.said or over < MOVED * values or not any(id(k.param()) in first for k in moved):
            return
        written = [self.written[p] for p in _pointers(moved) if p in self.written]
        self.said = True
        how = f"at {written[0]}" if written else "not by an nn.init function (.data written?)"
        steps = WAITS - load.waits[0] - 1
        when = "first step" if not steps else f"step {steps + 1} (after the load)"
        self.add(
            Finding(
                "loaded-weights-not-trained",
                "error",
                f"{len(moved)} of the {len(mine)} tensors loaded at {load.where} ({over:,} of "
                f"{values:,} values) were written over before {type(optimizer).__name__}'s "
                f"{when}, {how}: training starts from new weights, not the loaded ones "
                "(an initialisation applied after the load)",
                where=written[0].split(" (")[0] if written else load.where,
                evidence={
                    "loaded_at": load.where,
                    "tensors": len(mine),
                    "tensors_written_over": len(moved),
                    "values": values,
                    "values_written_over": over,
                    "written_at": written[0] if written else "",
                    "optimiser_steps_before": steps,
                },
            )
        )

    def _elsewhere(self, load: Load, params: list[torch.Tensor]) -> bool:
        """A load before the first step whose model the first optimiser does not step, where
        that optimiser steps a tensor of each loaded one's shape (taken in order within each
        shape: parameter groups may put the head first), half of them with other values."""
        if len(load.kept) < 2:
            return False
        by_shape: dict[tuple[int, ...], list[torch.Tensor]] = {}
        for p in params:
            by_shape.setdefault(tuple(p.shape), []).append(p)
        other = []
        for k in load.kept:
            same = by_shape.get(k.shape)
            if not same:
                return False
            other.append(k._replace(param=weakref.ref(same.pop(0))))
        return sum(_moved(k) for k in other) >= MOVED * len(other)

    def finish(self, steps: Sequence[float] = (), losses: Sequence[float] = ()) -> None:
        """The script ends: a load held by ``_elsewhere`` whose model never ran."""
        for load in self.early:
            if load.ran[0] or self.said:
                continue
            module = load.module()
            what = type(module).__name__ if module is not None else "a model since freed"
            self.said = True
            self.add(
                Finding(
                    "loaded-weights-not-trained",
                    "error",
                    f"load_state_dict at {load.where} loaded {what} ({len(load.kept)} tensors), "
                    "which never ran; the optimiser trained another model of the same shapes, "
                    "whose weights are not those loaded: training started from new weights (the "
                    "model built again after the load, or the weights loaded into another "
                    "instance than the one trained)",
                    where=load.where,
                    evidence={
                        "loaded_at": load.where,
                        "tensors": len(load.kept),
                        "freed": module is None,
                    },
                    fix="load the weights into the model the optimiser trains: "
                    "model.load_state_dict(...) after its last model = Net(...), before the "
                    "optimiser is built over model.parameters()",
                )
            )


def _ran(ran: list[Any], module: nn.Module, args: Any) -> None:
    """A loaded module's first forward: noted, and its pre-hook (``ran[1]``) removed."""
    ran[0] = True
    ran[1].remove()


def _plain(tensor: Any) -> TypeGuard[torch.Tensor]:
    """A tensor with values in memory of its own to read: dense, not empty, not on the meta
    device, not a subclass (a sharded DTensor's values are spread over processes)."""
    return (
        type(tensor) in (torch.Tensor, nn.Parameter)
        and checks.dense(tensor)
        and tensor.numel() > 0
        and tensor.device.type != "meta"
    )


def _kept(params: list[torch.Tensor]) -> list[Kept]:
    """Each of ``params``' values at ``SAMPLED`` evenly spaced positions, as it holds them now
    (brought to the host in one copy a device: a target network loaded at every step is read
    without a sync a tensor)."""
    picks = []  # (param, positions, values on its device)
    for param in params:
        flat = param.detach().reshape(-1)
        positions = torch.linspace(0, flat.numel() - 1, min(SAMPLED, flat.numel()))
        positions = positions.long().to(flat.device)
        picks.append((param, positions, flat[positions].float()))
    on_host: dict[int, torch.Tensor] = {}
    devices: dict[torch.device, list[int]] = {}
    for i, (param, _, _) in enumerate(picks):
        devices.setdefault(param.device, []).append(i)
    for indices in devices.values():
        values = torch.cat([picks[i][2] for i in indices]).cpu()
        sizes = [len(picks[i][2]) for i in indices]
        on_host.update(zip(indices, values.split(sizes), strict=True))
    return [
        Kept(weakref.ref(param), tuple(param.shape), positions, on_host[i])
        for i, (param, positions, _) in enumerate(picks)
    ]


def _moved(kept: Kept) -> bool:
    """Whether ``kept``'s tensor holds other values now: most of them moved, and what is left
    is no longer in line with what was loaded (loaded weights shrunk and perturbed on purpose,
    warm-starting, keep their correlation). Its tensor freed or resized: not judged, False."""
    param = kept.param()
    if param is None or param.numel() <= int(kept.positions[-1]):
        return False
    now = param.detach().reshape(-1)[kept.positions.to(param.device)].float().cpu()
    scale = kept.values.abs().mean() + 1e-12
    off = (now - kept.values).abs() > ROUNDING * torch.maximum(kept.values.abs(), scale)
    if off.float().mean() < MOVED:
        return False
    if len(now) < 2 or now.std() == 0 or kept.values.std() == 0:
        return True  # (a constant: zeros_, ones_)
    return bool(torch.corrcoef(torch.stack([now, kept.values]))[0, 1] < CORRELATED)


def _parametrized(module: nn.Module | None) -> set[int]:
    """The ids of ``module``'s parameters that a parametrisation registered since holds as its
    ``original`` (an orthogonal one sets it to what maps to the weight, not to the weight)."""
    if module is None:
        return set()
    return {id(p) for n, p in module.named_parameters() if "parametrizations." in n}


def _numel(kept: Kept) -> int:
    param = kept.param()
    return 0 if param is None else param.numel()


def _pointers(kept: list[Kept]) -> set[int]:
    """The data pointers of the kept tensors still alive."""
    return {p.data_ptr() for p in (k.param() for k in kept) if p is not None}
