"""Gradient clipping as ``treeqa doctor`` sees it: ``clip_grad_norm_``, ``clip_grad_value_`` and
the split API's ``clip_grads_with_norm_`` are wrapped for the length of the run, and so is
``get_total_norm``, to know when the norm given to ``clip_grads_with_norm_`` was taken.

- ``clip-before-backward``: every step of the clock clipped its parameters only while no
  backward had run since its last step (before the backward, or after the step), so the clip
  met last step's gradients (or none, after zero_grad) and the step applied fresh, unclipped
  ones. A clip with an infinite limit clips nothing (it reads the norm, to log it): not judged.
- ``clip-no-parameters``: a clip was given no parameters at all: a generator already used up
  (``params = model.parameters()`` given to the optimiser, then to every clip).
- ``clip-before-unscale``: with a ``GradScaler`` scaling the loss, the clock's gradients were
  clipped before ``scaler.unscale_(optimizer)``: the limit applied to gradients times the
  scale (65,536 at first), so every step is cut to a sliver of its size.
- ``clip-by-weight-norm``: ``clip_grads_with_norm_`` was given the norm ``get_total_norm``
  took of the parameters themselves (``get_total_norm(model.parameters())``), not of their
  gradients: every step's gradients are scaled by the weights' norm. A norm of the weights
  only logged is not judged.

A ``clip_grads_with_norm_`` given the very tensor ``get_total_norm`` returned while no backward
had run since the step, or while a loss scaler's gradients were still scaled, counts as a clip
made then: it scales the fresh gradients by a norm of none (or of last step's), or of the
scaled ones.

A call costs a Python wrapper and a dict lookup; the parameters are read into a list, as the
clip itself does first.
"""

from __future__ import annotations

import math
import types
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.amp.grad_scaler import OptState
from torch.nn.utils import clip_grad

from treeqa.health import sites, slips
from treeqa.health.findings import Finding
from treeqa.health.scalers import LossScalers
from treeqa.health.updates import Updates
from treeqa.health.wrap import (
    Arguments,
    Note,
    Wrappers,
    note_function_calls,
    note_function_results,
)

FUNCTIONS = ("clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_")
OWNERS = (torch.nn.utils, clip_grad)  # `from torch.nn.utils import ...`, and the deprecated alias
BEFORE_STEPS = 20
"""Steps in a row of the clock that clipped before their backward and not after it."""
SCALED_STEPS = 3
"""Steps in a row that clipped scaled gradients (one is enough to be wrong; three rule out a
scaler noted in another part of the script)."""


class Clipping:
    """``add``: where findings go (``HealthMonitor.add``); ``updates``: the clock's, which
    counts the backward calls since its last step."""

    def __init__(self, add: Callable[[Finding], None], updates: Updates, scalers: LossScalers):
        self.add, self.updates, self.scalers = add, updates, scalers
        self.reported: set[str] = set()
        self.wrappers = Wrappers()
        self.judge = Note(self._judge, "gradient clipping")
        self.reset(None)

    def install(self) -> None:
        for owner in OWNERS:
            for name in FUNCTIONS:
                self.wrappers.add(note_function_calls(owner, name, self.called))
        # (clip_grad_norm_ calls the private functions these are public names of: not noted)
        self.wrappers.add(note_function_results(torch.nn.utils, "get_total_norm", self.norm_taken))

    def uninstall(self) -> None:
        self.wrappers.undo()

    def reset(self, clock: torch.optim.Optimizer | None) -> None:
        """A new clock: judge its steps afresh."""
        self.clock = weakref.ref(clock) if clock is not None else None
        groups = clock.param_groups if clock is not None else []
        self.trained = {id(p) for group in groups for p in group["params"]}
        # This step clipped the clock's parameters before / after its first backward.
        self.before = self.after = False
        self.streak = 0
        self.site = ""
        self.scaled = 0  # steps in a row that clipped before unscale_
        self.scaled_now = False
        self.scaled_site = ""
        self.norm: NormTaken | None = None  # get_total_norm's last result

    def called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments | None:
        """``torch.nn.utils.<name>(parameters, ...)`` is about to run."""
        given = args[0] if args else kwargs.get("parameters")
        if given is None:
            return None
        params = [given] if isinstance(given, torch.Tensor) else list(given)
        limit = args[1] if len(args) > 1 else kwargs.get("max_norm", kwargs.get("clip_value"))
        norm = args[2] if len(args) > 2 else kwargs.get("total_norm")
        # Judged apart: should the judging fail, the clip still gets the parameters read here.
        self.judge(name, isinstance(given, types.GeneratorType), params, limit, norm)
        if isinstance(given, torch.Tensor):
            return None
        if args:
            return (params, *args[1:]), kwargs
        return args, {**kwargs, "parameters": params}

    def _judge(self, name: str, generator: bool, params: list[Any], limit: Any, norm: Any) -> None:
        if isinstance(limit, int | float) and math.isinf(limit):
            return  # clip_grad_norm_(params, inf) clips nothing: it reads the norm, to log it
        # clip_grads_with_norm_ given get_total_norm's last result: the clip as of that norm
        noted = self.norm if norm is not None and self.norm and self.norm.tensor() is norm else None
        if noted and noted.weights_site:
            self._report(slips.clip_by_weight_norm(), noted.weights_site)
        if not params:
            self._report(slips.clip_no_parameters(name, generator))
        elif id(params[0]) in self.trained:
            if self.updates.backwards and not (noted and noted.before_backward):
                self.after = True
                if noted and noted.scaled_site:
                    self.scaled_now, self.scaled_site = True, noted.scaled_site
                self.scaled_now = self.scaled_now or self._still_scaled()
            else:
                self.before, self.site = True, sites.user_site()

    def norm_taken(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], norm: Any
    ) -> None:
        """``torch.nn.utils.get_total_norm(tensors, ...)`` returned ``norm``."""
        if isinstance(norm, torch.Tensor):
            before = not self.updates.backwards
            scaled = not before and self._still_scaled()
            given = args[0] if args else kwargs.get("tensors")
            weights = sites.user_site() if _weights(given) else ""
            self.norm = NormTaken(
                weakref.ref(norm), before, self.scaled_site if scaled else "", weights
            )

    def end_step(self) -> None:
        """After the clock's optimiser step, before ``updates.end_step`` (which starts the
        count of backward calls afresh)."""
        if self.updates.backwards and self.before and not self.after:
            self.streak += 1
            if self.streak == BEFORE_STEPS:
                self._report(slips.clip_before_backward(self.streak), self.site)
        else:
            self.streak = 0
        self.scaled = self.scaled + 1 if self.scaled_now else 0
        if self.scaled == SCALED_STEPS:
            self._report(slips.clip_before_unscale(self.scalers.scale() or 0.0), self.scaled_site)
        self.before = self.after = self.scaled_now = False

    def _still_scaled(self) -> bool:
        """A loss scaler scaled this step's loss and has not unscaled the clock's gradients
        (its state for the optimiser is missing or READY until ``unscale_``)."""
        clock = self.clock() if self.clock is not None else None
        if clock is None:
            return False
        for scaler in self.scalers.enabled():
            state = scaler._per_optimizer_states.get(id(clock))  # no entry made by a read
            if state is None or state["stage"] is OptState.READY:
                self.scaled_site = sites.user_site()
                return True
        return False

    def _report(self, found: Finding | None, where: str | None = None) -> None:
        """``where``: the clip's line, noted when it ran; else the caller's line now."""
        if found is not None and found.code not in self.reported:
            self.reported.add(found.code)
            found.where = sites.user_site() if where is None else where
            self.add(found)


class NormTaken(NamedTuple):
    """A norm ``get_total_norm`` returned, as ``clip_grads_with_norm_`` may be given it."""

    tensor: weakref.ref[torch.Tensor]
    before_backward: bool  # taken while no backward had run since the clock's last step
    scaled_site: str  # the line it was taken at while the gradients were scaled ("": not)
    weights_site: str  # the line it was taken at of parameters, not gradients ("": gradients)


def _weights(given: Any) -> bool:
    """``get_total_norm`` was given parameters, not gradients: ``model.parameters()`` (a
    generator, read up by now, told by its function's name), or tensors that are parameters
    (``nn.Parameter``, or leaves that require grad: a model of raw tensors). A gradient is
    neither."""
    if isinstance(given, types.GeneratorType):
        return given.gi_code.co_name == "parameters"
    tensors = [given] if isinstance(given, torch.Tensor) else given
    if not isinstance(tensors, list | tuple):
        return False
    return any(
        isinstance(t, torch.nn.Parameter)
        or (isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad)
        for t in tensors
    )
