"""Name the first module that produced a NaN/Inf.

A non-finite loss (seen every step) or gradient (seen on sampled steps) arms the tracer; on the
next few steps a global forward hook looks for the first module whose output is non-finite
while its inputs are finite (or whose own parameters are not). The finding names that module,
or says that no module output was non-finite (the loss code itself is then the suspect).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health import checks, sites
from treeqa.health.findings import Finding

DIVERGED = 1e3
"""A loss this many times larger at the last finite step than some steps before: diverging."""


class NonFiniteTracer:
    """Arms on the first non-finite value, hooks forwards for up to ``watch_steps`` steps, reports once."""

    def __init__(self, add: Callable[[Finding], None], watch_steps: int = 3):
        self.add, self.watch_steps = add, watch_steps
        self.names: dict[int, str] = {}
        self.steps_left = 0
        self.origin: str | None = None
        self.watched = False  # forward hooks ran after the bad value (not at the run's end)
        self.evidence: dict[str, Any] = {}

    @property
    def armed(self) -> bool:
        return self.steps_left > 0

    def begin_step(self, guard: Callable[..., None] | None = None) -> Any:
        """The forward-hook handle to remove at the step's end, or None when not armed.
        ``guard(hook, *args)`` runs the hook (the monitor's ``safely``)."""
        if self.steps_left <= 0:
            return None
        self.watched = True
        hook = self._hook if guard is None else functools.partial(guard, self._hook)
        return torch.nn.modules.module.register_module_forward_hook(hook)

    def saw_gradients(self, step: int, bad: list[str]) -> None:
        """``bad``: parameters whose gradient is non-finite on a sampled step."""
        if bad and not self.evidence:
            self.evidence = {"step": step, "gradients": bad[:10]}
            self.steps_left = max(self.steps_left, 1)

    def saw_loss(self, step: int, value: float, before: Sequence[float] = ()) -> None:
        """``before``: the finite losses of the steps before this one, oldest first."""
        if not math.isfinite(value) and not self.evidence:
            self.evidence = {"step": step, "loss": str(value)}
            if len(before) >= 3 and abs(before[-1]) >= DIVERGED * max(abs(before[0]), 1e-12):
                self.evidence["loss_before"] = [float(f"{v:.4g}") for v in before]
            self.steps_left = self.watch_steps
        elif self.steps_left > 0 and (self.evidence.get("step") != step or self.origin):
            self.steps_left -= 1
            if self.origin or self.steps_left == 0:
                self.emit()

    def finish(self) -> None:
        if self.steps_left > 0 or self.evidence:
            self.emit()

    def emit(self) -> None:
        ev, origin = self.evidence, self.origin
        what = "gradients" if "gradients" in ev else "the loss"
        msg = f"non-finite values in {what} from step {ev.get('step')}"
        params = ev.get("non_finite_parameters")
        if origin and params:
            # Armed only after the bad step, whose optimiser step already wrote NaN/Inf into the
            # weights: this module did not produce it, the earlier step's forward or loss did.
            msg += (
                f"; {ev['module']}'s parameters ({', '.join(params[:5])}) are already non-finite, "
                f"updated at step {ev.get('step')}: look at that step's inputs and loss"
            )
        elif origin:
            msg += f"; first produced by module {origin}"
        elif "loss_before" in ev:  # finite outputs, a loss too large for float: divergence
            before = ev["loss_before"]
            msg += (
                f"; the loss grew from {before[0]:.3g} to {before[-1]:.3g} over the "
                f"{len(before)} steps before it: the run diverged (a learning rate too high, "
                "or inputs far from unit scale)"
            )
        elif self.watched:
            msg += "; no module output was non-finite (look at the loss code)"
        else:  # the run ended first, or a compiled model (no module hooks) ran
            msg += "; no forward was watched after it, so the module is not known"
        self.add(
            Finding(
                "non-finite",
                "error",
                msg,
                where=origin or ", ".join(ev.get("gradients", [])[:3]),
                evidence=dict(ev),
            )
        )
        self.steps_left = 0

    def _hook(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self.origin is not None:
            return
        # A layer returning several tensors (a flow's (z, log_det), an RNN's (out, h), a VAE's
        # (recon, mu, logvar)) is judged by each of them.
        if isinstance(output, dict):
            output = tuple(output.values())
        outs = [
            x
            for x in (output if isinstance(output, tuple | list) else (output,))
            if checks.dense(x)
            and not checks.untraceable(x)  # torch.compile's trace or a torch.func transform
            and x.is_floating_point()
        ]
        if not outs or all(bool(torch.isfinite(x).all()) for x in outs):
            return
        ins = [x for x in inputs if checks.dense(x) and x.is_floating_point()]
        bad_params = [
            n
            for n, p in module.named_parameters(recurse=False)
            if not bool(torch.isfinite(p).all())
        ]
        if all(bool(torch.isfinite(x).all()) for x in ins) or bad_params:
            name = self.names.get(id(module), type(module).__name__)
            site = sites.definition_site(module)
            # torch's own layers (nn.Linear) are named by their attribute, not torch's file.
            user = site and not site.startswith(sites.TORCH_DIR)
            self.origin = f"{name} ({type(module).__name__}{', ' + site if user else ''})"
            self.evidence["module"] = name
            if bad_params:
                self.evidence["non_finite_parameters"] = bad_params
