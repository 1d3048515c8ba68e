"""``layer-built-in-forward``: a layer with weights made inside a model's forward
(``x = nn.Linear(x.size(1), 10)(x)`` to skip working out a flattened size, ``self.head =
nn.Linear(...)`` on every call, an ``nn.LSTM``, an ``nn.Embedding`` or an
``nn.Parameter(torch.randn(...))`` made where it is used). Each forward draws new random
weights, which no optimiser holds and no step trains: the layer is noise that the rest of the
model learns around, and the same input gets another output at each call. A batch norm or a
dropout made there is also made in training mode at each call, whatever ``model.eval()`` set:
evaluation normalises by the batch and drops units.

On sampled training steps, while the step's hooks are on, ``nn.Module.__init__`` and
``nn.Parameter.__new__`` are wrapped: a module made while a module's forward runs (a module
call's frame on the stack) is kept until the step's end, with the script's line that made it
(past the ``__init__``s of its own classes), and so is a parameter the script's own line makes
there (torch's, a lazy layer's weights, are made once). Made again at one line on ``STEPS``
sampled steps, holding weights (or a dropout's or batch norm's training mode), it is the
finding; a block made there is named, not its layers. A layer built once, at the first forward
(a lazy head registered then, before the optimiser), is made on one step only; a model copied
for an inner loop (``copy.deepcopy``, as MAML does) is not made through ``__init__``; a layer
made between forwards (a linear probe's, a new task's head) is made in no forward.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_calls

STEPS = 2
"""Sampled steps on which a layer made at one line in a forward is made anew."""
HERE = str(Path(__file__).parent)


class BuiltLayers:
    """``add``: where findings go. ``watch()`` at a sampled step's start gives the handle that
    ends the watch (kept with the step's hooks); ``judge(step)`` after it."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.wrappers = Wrappers()
        self.made: list[tuple[nn.Module, str]] = []  # (module, line) made in a forward this step
        self.weights: list[tuple[int, str]] = []  # (values, line) of nn.Parameters made there
        self.steps: dict[str, list[int]] = {}  # line -> the sampled steps a layer was made at it
        self.said = False

    def watch(self) -> BuiltLayers | None:
        """Wrap ``nn.Module.__init__`` and ``nn.Parameter.__new__`` until ``remove()``: None
        when done or wrapped already."""
        if self.said or self.wrappers:
            return None
        self.wrappers.add(note_calls(nn.Module, "__init__", self._made))
        self.wrappers.add(note_calls(nn.Parameter, "__new__", self._parameter))
        return self if self.wrappers else None

    def remove(self) -> None:
        self.wrappers.undo()

    def _made(self, module: nn.Module, *_: Any, **__: Any) -> None:
        """``module.__init__`` starts (for a subclass, from its own ``__init__``)."""
        if _in_forward():
            self.made.append((module, _maker(module)))

    def _parameter(self, cls: type, data: Any = None, *_: Any, **__: Any) -> None:
        """``nn.Parameter(data)``, made by the script's own line (not by torch: a lazy
        layer's weights, made once)."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(HERE):
            frame = frame.f_back
        if frame is not None and sites.users(frame.f_code.co_filename) and _in_forward():
            values = data.numel() if isinstance(data, torch.Tensor) else 0
            self.weights.append((values, f"{frame.f_code.co_filename}:{frame.f_lineno}"))

    def judge(self, step: int) -> None:
        """The sampled step ``step`` ended: its layers made in a forward with weights or a
        training mode of their own, and its parameters made there, are counted at their
        lines."""
        made, self.made = self.made, []
        weights, self.weights = self.weights, []
        inner = {id(m) for module, _ in made for m in module.modules() if m is not module}
        found: dict[str, tuple[str, int, str]] = {}  # line -> (kind, weights, mode)
        for module, where in made:
            if id(module) in inner or not where:  # a layer of a block made there: the block's
                continue
            count = sum(p.numel() for p in module.parameters() if p.requires_grad)
            mode = _mode(module)
            if where not in found and (count or mode):
                found[where] = (type(module).__name__, count, mode)
        for count, where in weights:
            found.setdefault(where, ("Parameter", count, ""))
        for where, (kind, count, mode) in found.items():
            steps = self.steps.setdefault(where, [])
            steps.append(step)
            if len(steps) >= STEPS and not self.said:
                self.said = True
                self.add(_finding(kind, count, mode, where, steps))


def _in_forward() -> bool:
    """Whether a module's forward is running (a module call's frame on the stack)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code is not sites._CALL:
        frame = frame.f_back
    return frame is not None


def _mode(module: nn.Module) -> str:
    """What a layer does in training mode that it does not in eval mode ("" for none)."""
    if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats:
        return "normalises by the batch's own statistics"
    if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
        return "drops units"
    return ""


def _maker(module: nn.Module) -> str:
    """``file:line`` of the script's line that made ``module``: past the ``__init__``s of its
    own classes (a block of the script's, whose ``super().__init__()`` calls this one's)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and (
        not sites.users(frame.f_code.co_filename)
        or (frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is module)
    ):
        frame = frame.f_back
    return "" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _finding(kind: str, weights: int, mode: str, where: str, steps: list[int]) -> Finding:
    harms = []
    if weights:
        harms.append(
            "each forward draws new random weights, which no optimiser holds and no step "
            "trains: they stay noise that the rest of the model learns around"
        )
    if mode:
        harms.append(
            f"a new one is made in training mode at each call, whatever model.eval() set, so "
            f"it {mode} in evaluation too"
        )
    what = f"{kind} ({weights:,} weights)" if weights else kind
    return Finding(
        "layer-built-in-forward",
        "error",
        f"{what} is made inside a forward at {where}, anew at each call (sampled steps "
        f"{', '.join(map(str, steps[:5]))}): {'; '.join(harms)}",
        where=where,
        evidence={"layer": kind, "weights": weights, "steps": steps[:10]},
    )
