"""``layer-built-in-forward``: a layer with weights made inside a model's forward
(``x = nn.Linear(x.size(1), 10)(x)`` to skip working out a flattened size, ``self.head =
nn.Linear(...)`` on every call, an ``nn.LSTM``, an ``nn.Embedding`` or an
``nn.Parameter(torch.randn(...))`` made where it is used), or a head made in the training loop
at every step. Each call draws new random weights, which no optimiser holds and no step trains:
the layer is noise that the rest of the model learns around, and the same input gets another
output at each call. A batch norm made there is also made in training mode at each call,
whatever ``model.eval()`` set: evaluation normalises by the batch.

``nn.Module.__init__`` and ``nn.Parameter.__new__`` are wrapped from a sampled step's first
forward to its end, and from the end of the step before it where that one was sampled too (the
run's second and third steps: a head made in the loop before the forward). Each module made is
kept to the step's end with the script's line that made it (past the ``__init__``s of its own
classes) and whether a module's forward was running; each parameter made is noted as new, and
one the script's own line makes in a forward is kept. A module counts at its line where it
holds new weights that got a gradient (a throwaway layer run under ``no_grad`` does not), or is
a batch norm with running statistics; weights made the same as at the line's last count (a
fixed kernel, a layer norm's ones and zeros) do not. Counted at a line on ``STEPS`` sampled
steps, in a forward, or on two steps in a row outside one, it is the finding; a block made
there is named, not its layers. A layer built once (a lazy head registered at the first
forward, before the optimiser), a model copied for an inner loop (``copy.deepcopy``, as MAML
does: not made through ``__init__``), and a probe or a new task's head made once an epoch are
not. A dropout made inline is not named: it may follow the model's mode
(``.train(self.training)``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from torch import nn

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_calls, note_calls_and_results

STEPS = 2
"""Sampled steps on which a layer made at one line in a forward is made anew."""
HERE = str(Path(__file__).parent)


class BuiltLayers:
    """``add``: where findings go. The monitor calls ``open()`` at a sampled step's start (and
    at the end of a sampled step whose next one is sampled too), ``close()`` at a sampled
    step's end, then ``judge(step)``."""

    def __init__(self, add: Callable[[Finding], None]) -> None:
        self.add = add
        self.wrappers = Wrappers()
        # (module, line, whether in a forward) made while open
        self.made: list[tuple[nn.Module, str, bool]] = []
        self.params: list[tuple[nn.Parameter, str]] = []  # nn.Parameters the script made there
        self.new: set[int] = set()  # ids of every nn.Parameter made while open
        self.steps: dict[str, list[int]] = {}  # line -> the sampled steps a layer was made at it
        self.values: dict[str, list[float]] = {}  # line -> a few of the last weights made there
        self.said = False

    def open(self) -> None:
        """Wrap ``nn.Module.__init__`` and ``nn.Parameter.__new__`` (until ``close()``)."""
        if not self.said and not self.wrappers:
            self.wrappers.add(note_calls(nn.Module, "__init__", self._made))
            self.wrappers.add(
                note_calls_and_results(nn.Parameter, "__new__", self._making, self._parameter)
            )

    def close(self) -> None:
        self.wrappers.undo()

    def _made(self, module: nn.Module, *_: Any, **__: Any) -> None:
        """``module.__init__`` starts (for a subclass, from its own ``__init__``)."""
        self.made.append((module, _maker(module), sites.in_module_call()))

    def _making(self, cls: type) -> None:
        """Nothing to note before ``nn.Parameter.__new__`` runs."""

    def _parameter(self, cls: type, param: Any) -> None:
        """``nn.Parameter(data)`` made ``param``: noted as new, and kept where the script's
        own line made it in a forward (not torch: a layer's weights are its layer's)."""
        self.new.add(id(param))
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(HERE):
            frame = frame.f_back
        if frame is not None and sites.users(frame.f_code.co_filename) and sites.in_module_call():
            self.params.append((param, f"{frame.f_code.co_filename}:{frame.f_lineno}"))

    def judge(self, step: int) -> None:
        """The sampled step ``step`` ended: its layers made with new weights that got
        gradients (or a batch norm's training mode), and its parameters made in a forward, are
        counted at their lines; weights made the same at two steps (a fixed kernel set each
        time, a norm's ones and zeros) are no random ones."""
        made, self.made = self.made, []
        params, self.params = self.params, []
        new, self.new = self.new, set()
        inner = {id(m) for module, _, _ in made for m in module.modules() if m is not module}
        found: dict[str, tuple[str, list[nn.Parameter], str, bool]] = {}
        for module, where, forward in made:
            if id(module) in inner or not where or where in found:
                continue  # (a layer of a block made there: the block is named)
            mine = [p for p in module.parameters() if id(p) in new and _trained(p)]
            mode = _mode(module)
            if mine or mode:
                found[where] = (type(module).__name__, mine, mode, forward)
        for param, where in params:
            if _trained(param):
                found.setdefault(where, ("Parameter", [param], "", True))
        for where, (kind, mine, mode, forward) in found.items():
            values = _some_values(mine)
            fixed = values == self.values.get(where)
            self.values[where] = values
            if fixed and not mode:
                continue
            steps = self.steps.setdefault(where, [])
            steps.append(step)
            # Made outside a forward (in the loop), at two steps in a row: a probe or a new
            # task's head made once an epoch is not.
            repeated = len(steps) >= STEPS and (forward or steps[-1] == steps[-2] + 1)
            if repeated and not self.said:
                self.said = True
                weights = sum(p.numel() for p in mine)
                self.add(_finding(kind, weights, mode, where, steps, forward))


def _trained(param: nn.Parameter) -> bool:
    """A weight the step trained: it requires gradients and got one (not a throwaway layer
    run without gradients, nor one made on the meta device)."""
    return param.requires_grad and param.grad is not None


def _some_values(params: list[nn.Parameter]) -> list[float]:
    """The first few values of the first of ``params`` (one host read; [] for none)."""
    if not params:
        return []
    return params[0].detach().reshape(-1)[:8].float().tolist()


def _mode(module: nn.Module) -> str:
    """What a layer made anew at each call does wrong in eval mode ("" for nothing): a batch
    norm's running statistics are a new layer's, never the data's. (A dropout made in forward
    may follow the model's mode, ``.train(self.training)``; it is not named.)"""
    if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats:
        return "normalises by the batch's own statistics"
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


def _finding(
    kind: str, weights: int, mode: str, where: str, steps: list[int], forward: bool
) -> Finding:
    harms = []
    if weights:
        harms.append(
            "each draws new random weights, which no optimiser holds and no step trains: they "
            "stay noise that the rest of the model learns around"
        )
    if mode:
        harms.append(
            f"a new one is made in training mode at each call, whatever model.eval() set, so "
            f"it {mode} in evaluation too"
        )
    what = f"{kind} ({weights:,} weights)" if weights else kind
    made = "inside a forward" if forward else "in the training loop, outside the model,"
    return Finding(
        "layer-built-in-forward",
        "error",
        f"{what} is made {made} at {where}, anew at each call (sampled steps "
        f"{', '.join(map(str, steps[:5]))}): {'; '.join(harms)}",
        where=where,
        evidence={"layer": kind, "weights": weights, "steps": steps[:10], "in_forward": forward},
    )
