"""Parameters that get gradients and that nothing steps (``not-in-optimiser``), and weights
a model holds where it does not register them (``module-not-registered``), for ``Updates``.

On the clock's ``ORPHAN_STEP``-th step (by then every optimiser of the loop has stepped): the
trained models' parameters with a gradient that no stepping optimiser holds; layers and
parameters held in plain lists, tuples and dicts (``registration.py``), reported at once, and
plain tensors that require gradients, judged at the next sampled step (the same tensor must
still be there: an attack's perturbation made anew each step is no weight); the
``nn.Parameter``s the loss reaches outside the models (``loose.py``). On later sampled steps:
parameters unfrozen since (staged unfreezing, of the trained models or of a model run beside
them that was frozen at the clock's start) whose gradients changed, held by no optimiser. Where
an optimiser that has not stepped holds them, the finding waits for the run's end: it may start
after a warm-up, or step once in many.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health import registration, sites, slips
from treeqa.health.findings import Finding
from treeqa.health.loose import LooseParameters

ORPHAN_STEP = 10
"""The clock's step (counted from its first) on which parameters with gradients are looked up
in the optimisers: by then every optimiser of the loop has stepped."""


class Orphans:
    """``report``: where findings go (``Updates._report``); ``held(optimizer)``: the ids of the
    parameters of ``optimizer`` and of every optimiser that stepped; ``optimizers``: those
    that stepped; ``reported``: the codes said so far."""

    def __init__(
        self,
        report: Callable[..., None],
        held: Callable[[torch.optim.Optimizer], set[int]],
        optimizers: weakref.WeakSet[torch.optim.Optimizer],
        reported: set[str],
    ):
        self.report, self.held = report, held
        self.optimizers, self.reported = optimizers, reported
        self.loose = LooseParameters()  # nn.Parameters the loss uses outside the models
        # plain tensors requiring gradients on the models at ORPHAN_STEP: (module, attribute,
        # path, tensor), judged at the next sampled step
        self.plain: list[tuple[Any, str, str, Any]] = []
        # not-in-optimiser for parameters an optimiser holds that had not stepped by then
        self.idle: tuple[Finding, weakref.ref[torch.optim.Optimizer]] | None = None
        # models run beside the trained ones, and their parameters frozen at the clock's start
        self.beside: list[weakref.ref[nn.Module]] = []
        self.frozen_first: set[int] = set()
        self.reset()

    def reset(self) -> None:
        """A new clock."""
        # (id, version) of the gradient of each trainable model parameter no optimiser holds,
        # at the last sampled step after ORPHAN_STEP: one that changes is a fresh gradient
        self.orphan_grads: dict[int, tuple[int, int]] = {}

    def at_orphan_step(
        self,
        step: int,
        optimizer: torch.optim.Optimizer,
        roots: list[nn.Module],
        loss: torch.Tensor | None,
        by_hand: bool,
    ) -> None:
        """The clock's ``ORPHAN_STEP``-th step, ``loss`` its loss (None if unknown)."""
        unregistered = self._note_unregistered(optimizer, roots)
        if not by_hand:
            self._note_orphans(optimizer, roots)
        if not by_hand and loss is not None:
            known = [p for model in roots for p in model.parameters()] + unregistered
            self.loose.look(step, loss, self.held(optimizer), known)

    def later(self, step: int, optimizer: torch.optim.Optimizer, roots: list[nn.Module]) -> None:
        """A sampled step of the clock after ``ORPHAN_STEP`` (not one of updates by hand)."""
        if self.plain:
            self._note_plain(optimizer)
        self._note_late_orphans(optimizer, roots)
        if self.loose.noted:
            stuck = self.loose.stuck(step, self.held(optimizer))
            self._report_orphans(stuck, outside=True)

    def finish(self) -> None:
        """The run ended: an optimiser noted as holding orphans that never stepped."""
        if self.idle is not None:
            found, holder = self.idle
            if holder() is None or holder() not in self.optimizers:
                self.report(found, at_step=False)

    def _note_unregistered(
        self, optimizer: torch.optim.Optimizer, roots: list[nn.Module]
    ) -> list[torch.Tensor]:
        """``module-not-registered``; the parameters it names. Plain tensors that require
        gradients are judged at the next sampled step, if the module still holds the same
        tensor then (``_note_plain``)."""
        # Their gradients are never cleared (zero_grad() does not reach them): had the
        # forward used them since the first step, they have one.
        found = [f for f in registration.unregistered(roots) if f[3].grad is not None]
        held_in, self.plain = [], []
        for module, attr, path, p in found:
            if isinstance(vars(module).get(attr), torch.Tensor):
                self.plain.append((weakref.ref(module), attr, path, weakref.ref(p)))
            else:
                held_in.append((module, attr, path, p))
        self._report_unregistered(optimizer, held_in)
        return [p for *_, p in found]

    def _note_plain(self, optimizer: torch.optim.Optimizer) -> None:
        """The plain tensors noted at ``ORPHAN_STEP`` that the same module attribute still
        holds, with a gradient: weights made by hand (a class token). A tensor made anew each
        step (an attack's perturbation kept on the model, an RNN's state carried as a leaf for
        truncated backpropagation) is no weight, and is let go."""
        plain, self.plain = self.plain, []
        found = []
        for module_ref, attr, path, ref in plain:
            module, p = module_ref(), ref()
            if module is None or p is None or vars(module).get(attr) is not p or p.grad is None:
                continue
            found.append((module, attr, path, p))
        self._report_unregistered(optimizer, found)

    def _report_unregistered(
        self, optimizer: torch.optim.Optimizer, found: list[tuple[Any, str, str, torch.Tensor]]
    ) -> None:
        """``module-not-registered`` for ``found``, if any: said as for weights an optimiser
        holds where one does (only saving and moving the model miss them)."""
        if found:
            held = self.held(optimizer)
            trained = all(id(p) in held for *_, p in found)
            self.report(registration.module_not_registered(found, trained))

    def _note_orphans(self, optimizer: torch.optim.Optimizer, roots: list[nn.Module]) -> None:
        held = self.held(optimizer)
        orphans = [
            (name, p)
            for name, p in _named(roots)
            # (a gradient left from before the layer was frozen: no backward writes it now)
            if p.grad is not None and p.requires_grad and id(p) not in held
        ]
        self._report_orphans(orphans)

    def _note_late_orphans(self, optimizer: torch.optim.Optimizer, roots: list[nn.Module]) -> None:
        """Parameters made trainable after ``ORPHAN_STEP`` (staged unfreezing) that no
        optimiser holds (one built over the parameters that were trainable then): their
        gradients change between two sampled steps, and nothing applies them. A gradient left
        from before a layer was frozen does not change, and a frozen layer is skipped."""
        if "not-in-optimiser" in self.reported:
            return
        held = self.held(optimizer)
        seen, self.orphan_grads = self.orphan_grads, {}
        orphans = []
        beside = [(name, p) for name, p in self._frozen_params() if id(p) in self.frozen_first]
        for name, p in [*_named(roots), *beside]:
            grad = p.grad
            if grad is None or not p.requires_grad or id(p) in held:
                continue
            mark = (id(grad), grad._version)
            self.orphan_grads[id(p)] = mark
            if seen.get(id(p), mark) != mark:
                orphans.append((name, p))
        if beside and orphans:  # as the script names them (``backbone.0.weight``)
            names = sites.script_names((p for _, p in orphans), paths_first=True)
            orphans = [(names.get(id(p), name), p) for name, p in orphans]
        self._report_orphans(orphans)

    def frozen_beside(self, models: list[nn.Module]) -> None:
        """The models the clock's first step ran that it does not train: their parameters
        frozen then, which a script may unfreeze later (a backbone beside the head that trains)
        and forget to give to an optimiser."""
        self.beside = [weakref.ref(m) for m in models]
        self.frozen_first = {id(p) for _, p in self._frozen_params() if not p.requires_grad}

    def _frozen_params(self) -> list[tuple[str, nn.Parameter]]:
        models = [m for m in (ref() for ref in self.beside) if m is not None]
        return [(f"{type(m).__name__}.{n}", p) for m in models for n, p in m.named_parameters()]

    def _report_orphans(
        self, orphans: Sequence[tuple[str, torch.Tensor]], outside: bool = False
    ) -> None:
        """``outside``: parameters outside the trained models (``loose.py``), named as the
        script names them: where the first is assigned in it is the finding's place."""
        if orphans:
            names = [n for n, _ in orphans]
            values = sum(p.numel() for _, p in orphans)
            holder = None if outside else self._idle_holder([p for _, p in orphans])
            idle = type(holder).__name__ if holder is not None else ""
            found = slips.not_in_optimiser(names, values, outside, idle)
            if holder is not None:  # judged at the run's end: it may start later, or step less
                self.idle = (found, weakref.ref(holder))
                return
            frame = sites.user_frame() if outside else None
            if frame is not None:  # log_temperature = nn.Parameter(...); domains = nn.Sequential(
                found.where = sites.assignment_site(
                    [frame.f_code.co_filename], names[0].split(".")[0]
                )
            self.report(found)

    def _idle_holder(self, params: Sequence[torch.Tensor]) -> torch.optim.Optimizer | None:
        """An optimiser that holds some of ``params`` and has not stepped yet (its ``step()``
        left out of the loop, or one that starts after a warm-up or steps once in many); None
        if none. One pass over the objects the garbage collector tracks, made once: when the
        finding is."""
        ids = {id(p) for p in params}
        for obj in gc.get_objects():
            # (by its type: isinstance reads __class__, which a deprecated alias among the
            # objects, torch.distributed.reduce_op, answers with a FutureWarning)
            if issubclass(type(obj), torch.optim.Optimizer) and obj not in self.optimizers:
                if any(id(p) in ids for group in obj.param_groups for p in group["params"]):
                    return obj
        return None


def _named(roots: list[nn.Module]) -> list[tuple[str, nn.Parameter]]:
    """The trained models' parameters by name, the second model's and on prefixed."""
    return [
        ((f"model{i}." if i else "") + name, p)
        for i, root in enumerate(roots)
        for name, p in root.named_parameters()
    ]
