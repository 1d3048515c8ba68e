"""``torch.manual_seed`` called with the same seed on every step (``seed-reset-every-step``):
every step then draws the same random numbers, so dropout masks, noise inputs and random
augmentations repeat step after step.

``torch.manual_seed`` is wrapped for the run (a note per call; a healthy script calls it once);
at each of the clock's steps the last seed given since the step before is compared with the
one before it. Seeds that change from step to step (``seed + step``, for reproducible steps)
are fine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import checks, slips
from treeqa.health.checks import Finding
from treeqa.health.wrap import Wrappers, note_function_calls

SEEDED_STEPS = 20
"""Steps in a row, each seeded with the seed of the step before."""


class Seeds:
    """``add``: where the finding goes (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.wrappers = Wrappers()
        self.seed: Any = None  # the last seed given since the last step (None: none)
        self.where = ""
        self.last: Any = None  # the seed of the last step that was seeded
        self.steps = 0  # steps in a row seeded with the seed of the step before
        self.reported = False

    def install(self) -> None:
        self.wrappers.add(note_function_calls(torch, "manual_seed", self._seeded))

    def uninstall(self) -> None:
        self.wrappers.undo()

    def _seeded(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.seed = args[0] if args else kwargs.get("seed")
        if self.steps + 1 >= SEEDED_STEPS:  # the stack is walked only when it may be needed
            self.where = checks.user_site()

    def end_step(self) -> None:
        seed, self.seed = self.seed, None
        if seed is None:
            self.steps, self.last = 0, None
            return
        self.steps = self.steps + 1 if seed == self.last else 1
        self.last = seed
        if self.steps == SEEDED_STEPS and not self.reported:
            self.reported = True
            found = slips.seed_reset_every_step(seed, self.steps)
            found.where = self.where
            self.add(found)
