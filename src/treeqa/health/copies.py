"""``evaluated-copy-at-init``: the model a script evaluates is a copy of the trained one, made
before its first step, whose weights are still mostly the ones it was made with. An exponential
average with a decay the run is too short for (0.9999 over 1,000 steps keeps 90% of its start),
an update that writes nothing (``e = d * e + (1 - d) * p`` binds a loop variable), an update
never called, or a best-model copy whose comparison never holds (``if val_loss > best_loss``
from infinity): the score reported is the untrained model's.

``copy.deepcopy`` is wrapped for the run (and the name ``AveragedModel`` copies with): a
module copied with parameters before the run's first optimiser step becomes a copy watched,
with 64 evenly spaced values of each parameter kept, the same places of its source's, and its
parameters' version counters. A forward pre-hook on the copy notes its forwards: one in eval
mode or without gradients is an evaluation, and at the first of a step (one host read) the
copy is placed against its source: ``f``, the share of the way the source's kept values moved
from the start that the copy's moved along it (a projection: 1 for a copy that follows, 0 for
one left at its start), whether its parameters were written since, and the script's line; the
rows its forwards read at that step are hashed (``heldout.row_hashes`` of the first input, 256
rows a forward at most, on the device), as are those of the trained model's own evaluations at
the clock's latest step, while a copy is watched.

When the run ends, a copy is judged on its last evaluation: 20 steps or more after it was
made, the source moved (1% of its kept values' size or more), ``f`` under 0.5, the copy given
no gradient (not trained itself: an ensemble's member), and forwarded on fewer than half of the
steps since it was made (a reference model read inside each step, a mean teacher: part of the
training). A copy never written since it was made, evaluated once, is also not judged where
half its rows or more were scored by the trained model too after its last step (one host read:
an untrained baseline shown beside the trained model, on purpose; an average that never moves,
evaluated beside the model every epoch, is judged).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.optim import swa_utils

from treeqa.health import hooks, sites
from treeqa.health.findings import Finding
from treeqa.health.heldout import given, row_hashes
from treeqa.health.wrap import Watched, Wrappers, note_calls_of, note_function_results

MADE_BY = 2
"""Copies made by this many clock steps are watched (an average made lazily at the first step's
end, ``if ema is None: ema = deepcopy(model)``, is made from weights one step from the start)."""
REFERENCE = 0.2
"""A copy run on this share of the steps since it was made or more is read inside them: a
reference (a KL anchor, a teacher), part of the training, never judged."""
KEPT = 64
"""Values kept of each parameter (evenly spaced)."""
COPIES = 8
"""Copies watched at once (the newest); an older one's hook comes off."""
FOLLOWED = 0.5
"""A copy that followed less than this share of its source's way is at its start."""
STEPS = 20
"""Steps after the copy was made before its evaluation is judged."""
MOVED = 0.01
"""The source's kept values moved by at least this share of their size."""
ROWS = 256
"""Rows hashed of a forward's first input at most."""
FORWARDS = 64
"""Forwards of an evaluation whose rows are hashed at most."""


@dataclass
class Evaluation:
    """A copy's evaluation: the step, the share followed, whether it was written since it was
    made, whether it had gradients, where, and its rows' hashes (a tensor a forward)."""

    step: int
    followed: float
    written: bool
    graded: bool  # a gradient on any of its parameters (trained itself)
    where: str
    rows: list[torch.Tensor] = field(default_factory=list)


@dataclass
class Copy:
    """A module copied before the first step: the copy and its source (weakly), the places
    kept, the copy's values there when made, its parameters' version counters then, where and
    at which step it was made, the steps it ran at, and its evaluations' last."""

    copied: weakref.ref[nn.Module]
    source: weakref.ref[nn.Module]
    places: list[torch.Tensor]
    start: list[torch.Tensor]
    versions: list[int]
    ids: set[int]  # its parameters'
    where: str
    step: int
    handle: Any = None
    steps_run: set[int] = field(default_factory=set)
    touched: set[int] = field(default_factory=set)  # steps its parameters were read at
    evaluations: int = 0  # steps it was evaluated at
    last: Evaluation | None = None
    moved: bool = False  # its source moved off the start by MOVED at an evaluation
    snapshot: bool = False  # weights were loaded into it (load_state_dict)


class Copies:
    """``add``: where findings go; ``safely``: runs the hooks' work (``HealthMonitor.safely``);
    ``step()``: the clock's steps so far; ``optimised()``: the ids of the parameters of the
    optimisers that stepped."""

    def __init__(
        self,
        add: Callable[[Finding], None],
        safely: Callable[..., None],
        step: Callable[[], int],
        optimised: Callable[[], set[int]],
    ):
        self.add, self.safely, self.step, self.optimised = add, safely, step, optimised
        self.copies: list[Copy] = []
        # the trained model's evaluations at the clock's latest step: that step, its rows
        self.scored: tuple[int, list[torch.Tensor]] = (-1, [])
        self.wrappers = Wrappers()
        self.watched = Watched()  # the copies' ids, whose parameters read are noted
        self.reading = False  # the copies' parameters are read here

    def install(self) -> None:
        self.wrappers.add(note_function_results(copy, "deepcopy", self._copied))
        self.wrappers.add(note_function_results(swa_utils, "deepcopy", self._copied))

    def uninstall(self) -> None:
        self.wrappers.undo()
        for c in self.copies:
            if c.handle is not None:
                c.handle.remove()
                c.handle = None

    def model_scored(self, args: Any, kwargs: Any) -> None:
        """The trained model ran in an evaluation: its rows, at this step."""
        if not self.copies:
            return
        step, rows = self.scored
        if step != self.step():
            self.scored = (self.step(), rows := [])
        if len(rows) < FORWARDS:
            rows.append(_rows(args, kwargs))

    def _copied(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], made: Any) -> None:
        """``copy.deepcopy(args[0])`` returned ``made``."""
        source = args[0] if args else None
        if self.step() > MADE_BY or not isinstance(made, nn.Module):
            return
        if not isinstance(source, nn.Module):
            return
        params, sources = list(made.parameters()), list(source.parameters())
        if not params or len(params) != len(sources):
            return
        if any(a.shape != b.shape for a, b in zip(params, sources, strict=True)):
            return
        places = [
            torch.linspace(0, a.numel() - 1, min(KEPT, a.numel()), device=a.device).long()
            for a in params
        ]
        with torch.no_grad():
            start = [a.detach().reshape(-1)[i].float() for a, i in zip(params, places, strict=True)]
        kept = Copy(
            weakref.ref(made),
            weakref.ref(source),
            places,
            start,
            [a._version for a in params],
            {id(a) for a in params},
            sites.user_site(),
            self.step(),
        )
        hook = hooks.ModelHook(self.safely, self._ran, kept)  # (taken off at the run's end)
        kept.handle = made.register_forward_pre_hook(hook, with_kwargs=True)
        self.copies.append(kept)
        self.watched.ids.add(id(made))
        if len(self.copies) == 1:  # (a script without copies pays nothing)
            read = note_calls_of(nn.Module, "named_parameters", self.touched, self.watched)
            self.wrappers.add(read)
        while len(self.copies) > COPIES:
            old = self.copies.pop(0)
            self.watched.ids.discard(id(old.copied()))
            if old.handle is not None:
                old.handle.remove()

    def touched(self, module: nn.Module, *args: Any, **kwargs: Any) -> None:
        """A copy's parameters are read (``named_parameters``, which ``parameters`` calls;
        ``state_dict``, told by ``loaded.py``, which wraps it): an update of it, it may be."""
        if self.reading or id(module) not in self.watched.ids:
            return
        for kept in self.copies:
            if kept.copied() is module:
                kept.touched.add(self.step())

    def _ran(self, kept: Copy, module: nn.Module, args: Any, kwargs: Any) -> None:
        """The copy ``kept`` runs a forward."""
        step = self.step()
        if kept.last is not None and kept.last.step == step:  # (its evaluation read already)
            if len(kept.last.rows) < FORWARDS:
                kept.last.rows.append(_rows(args, kwargs))
            return
        if step in kept.steps_run:
            return
        kept.steps_run.add(step)
        trained_for = step - kept.step
        if trained_for < 1 or len(kept.steps_run) > max(1, REFERENCE * trained_for):
            return  # (before training; or run on many steps: inside them, a reference)
        source = kept.source()
        if source is None:
            return
        self.reading = True  # (its own reads of the parameters are no script's)
        try:
            self._read(kept, module, source, args, kwargs)
        finally:
            self.reading = False

    def _read(
        self, kept: Copy, module: nn.Module, source: nn.Module, args: Any, kwargs: Any
    ) -> None:
        """The copy's evaluation at this step: how far it followed its source."""
        step = self.step()
        params = list(module.parameters())
        sources = list(source.parameters())
        if len(params) != len(kept.places) or len(sources) != len(kept.places):
            return
        with torch.no_grad():
            sums = torch.zeros(3, device=kept.start[0].device)
            for p, q, i, s in zip(params, sources, kept.places, kept.start, strict=True):
                t, m = p.detach().reshape(-1)[i].float(), q.detach().reshape(-1)[i].float()
                sums += torch.stack([((t - s) * (m - s)).sum(), ((m - s) ** 2).sum(), (s**2).sum()])
            along, moved, size = sums.tolist()  # (one host read an evaluation)
        kept.moved = moved > (MOVED**2) * max(size, 1e-12)
        written = any(p._version != v for p, v in zip(params, kept.versions, strict=True))
        followed = along / moved if moved > 0 else 1.0
        kept.evaluations += 1
        graded = any(p.grad is not None for p in params)
        kept.last = Evaluation(step, followed, written, graded, sites.models_caller())
        kept.last.rows.append(_rows(args, kwargs))

    def loaded(self, module: nn.Module, where: str) -> None:
        """``module.load_state_dict`` loaded weights: into a copy, a snapshot kept on purpose
        (the best epoch's, a target network's sync)."""
        for kept in self.copies:
            if kept.copied() is module:
                kept.snapshot = True

    def finish(self, steps: Sequence[float] = (), losses: Sequence[float] = ()) -> None:
        """The run ends: judge each copy on its last evaluation."""
        optimised = self.optimised()
        for kept in self.copies:
            last = kept.last  # (the copy may be gone: a function's local, returned and scored)
            if last is None or not kept.moved or last.followed >= FOLLOWED:
                continue
            trained_for = last.step - kept.step
            if trained_for < STEPS or len(kept.steps_run) >= REFERENCE * trained_for:
                continue  # (a reference read inside the steps: part of the training)
            if kept.snapshot or last.graded or not optimised.isdisjoint(kept.ids):
                continue  # (trained itself; or a snapshot loaded into it: a best epoch's)
            touched = len(kept.touched) >= trained_for / 2  # (an update that wrote nothing)
            if not (last.written or touched) and kept.evaluations == 1 and self._beside(last):
                continue  # (an untrained baseline scored once, beside the trained model)
            self._say(kept, last, trained_for)
            return

    def _beside(self, last: Evaluation) -> bool:
        """Whether the trained model scored half the rows or more of this evaluation of a
        copy, after it (one host read)."""
        step, rows = self.scored
        if step < last.step or not rows or not last.rows:
            return False
        mine = torch.cat([r.cpu() for r in last.rows]).tolist()
        theirs = set(torch.cat([r.cpu() for r in rows]).tolist())
        return sum(h in theirs for h in mine) >= len(mine) / 2

    def _say(self, kept: Copy, last: Evaluation, trained_for: int) -> None:
        if last.written:
            what = (
                f"updated since, it has followed {max(last.followed, 0):.0%} of the way the "
                "trained model's weights moved from there (an average whose decay the run is "
                "too short for: 0.9999 over 1,000 steps keeps 90% of its start)"
            )
        else:
            what = (
                "its weights were never written since (an update that binds a name instead "
                "of writing in place, one never called, a best-model comparison that never "
                "held): it is the untrained model"
            )
        self.add(
            Finding(
                "evaluated-copy-at-init",
                "warning",
                f"the model evaluated here is a copy of the trained one made before its first "
                f"step (at {kept.where}), {trained_for} steps before this evaluation; {what}, "
                f"so its score is the start's, not the training's",
                where=last.where,
                evidence={
                    "followed": round(last.followed, 4),
                    "written": last.written,
                    "steps": trained_for,
                    "copied_at": kept.where,
                },
            )
        )


def _rows(args: Any, kwargs: Any) -> torch.Tensor:
    """The hashes of the first rows of a forward's first input (none: an empty tensor)."""
    first = next(iter(given(args, kwargs)), None)
    if first is None:
        return torch.zeros(0, dtype=torch.int64)
    with torch.no_grad():
        rows = first.detach()[:ROWS]
        return row_hashes(rows.reshape(rows.shape[0], -1))
