"""Gradient clipping as ``treeqa doctor`` sees it: ``clip_grad_norm_`` and ``clip_grad_value_``
are wrapped for the length of the run.

- ``clip-before-backward``: every step of the clock clipped its parameters only while no
  backward had run since its last step (before the backward, or after the step), so the clip
  met last step's gradients (or none, after zero_grad) and the step applied fresh, unclipped
  ones. A clip with an infinite limit clips nothing (it reads the norm, to log it): not judged.
- ``clip-no-parameters``: a clip was given no parameters at all: a generator already used up
  (``params = model.parameters()`` given to the optimiser, then to every clip).

A call costs a Python wrapper and a dict lookup; the parameters are read into a list, as the
clip itself does first.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.utils import clip_grad

from treeqa.health import checks
from treeqa.health.checks import Finding
from treeqa.health.updates import Updates
from treeqa.health.wrap import Arguments, note_function_calls

FUNCTIONS = ("clip_grad_norm_", "clip_grad_value_")
OWNERS = (torch.nn.utils, clip_grad)  # `from torch.nn.utils import ...`, and the deprecated alias
BEFORE_STEPS = 20
"""Steps in a row of the clock that clipped before their backward and not after it."""


class Clipping:
    """``add``: where findings go (``HealthMonitor.add``); ``updates``: the clock's, which
    counts the backward calls since its last step."""

    def __init__(self, add: Callable[[Finding], None], updates: Updates):
        self.add, self.updates = add, updates
        self.reported: set[str] = set()
        self._undo: list[Callable[[], None]] = []
        self.reset([])

    def install(self) -> None:
        for owner in OWNERS:
            for name in FUNCTIONS:
                undo = note_function_calls(owner, name, self.called)
                if undo is not None:
                    self._undo.append(undo)

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def reset(self, trained: list[nn.Parameter]) -> None:
        """A new clock, training ``trained``: judge its steps afresh."""
        self.trained = {id(p) for p in trained}
        # This step clipped the clock's parameters before / after its first backward.
        self.before = self.after = False
        self.streak = 0
        self.site = ""

    def called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments | None:
        """``torch.nn.utils.<name>(parameters, ...)`` is about to run."""
        given = args[0] if args else kwargs.get("parameters")
        if given is None:
            return None
        params = [given] if isinstance(given, torch.Tensor) else list(given)
        limit = args[1] if len(args) > 1 else kwargs.get("max_norm", kwargs.get("clip_value"))
        if isinstance(limit, int | float) and math.isinf(limit):
            pass  # clip_grad_norm_(params, inf) clips nothing: it reads the norm, to log it
        elif not params:
            self._report(checks.clip_no_parameters(name, isinstance(given, types.GeneratorType)))
        elif id(params[0]) in self.trained:
            if self.updates.backwards:
                self.after = True
            else:
                self.before, self.site = True, checks.user_site()
        if isinstance(given, torch.Tensor):
            return None
        if args:
            return (params, *args[1:]), kwargs
        return args, {**kwargs, "parameters": params}

    def end_step(self) -> None:
        """After the clock's optimiser step, before ``updates.end_step`` (which starts the
        count of backward calls afresh)."""
        if self.updates.backwards and self.before and not self.after:
            self.streak += 1
            if self.streak == BEFORE_STEPS:
                found = checks.clip_before_backward(self.streak)
                if found is not None:
                    found.where = self.site
                    self._report(found, site=False)
        else:
            self.streak = 0
        self.before = self.after = False

    def _report(self, found: Finding | None, site: bool = True) -> None:
        if found is not None and found.code not in self.reported:
            self.reported.add(found.code)
            if site:
                found.where = checks.user_site()
            self.add(found)
