"""A random number generator seeded with the same seed on every step
(``seed-reset-every-step``): every step then draws the same random numbers, so dropout masks,
noise inputs, random augmentations and sampled batches repeat step after step.

The seeding functions of torch (``torch.manual_seed``, also reached as
``torch.random.manual_seed``), Python (``random.seed``) and NumPy (``numpy.random.seed``) are
wrapped for the run (a note per call; a healthy script calls each once). At each of the
clock's steps the last seed each generator was given since the step before is compared with
the one it was given on the step before: a ``set_seed(0)`` helper that seeds all three counts
once. Seeds that change from step to step (``seed + step``, for reproducible steps) are fine,
and so is ``random.seed()`` without a seed (fresh entropy).
"""

from __future__ import annotations

import contextlib
import importlib
import random
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from treeqa.health import sites, slips
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, install_wrapper, note_function_calls

SEEDED_STEPS = 20
"""Steps in a row, each seeding a generator with the seed it had on the step before."""


def _seeding_functions() -> list[tuple[Any, str, str]]:
    """(owner, attribute, name in the finding) of each seeding function wrapped."""
    functions = [
        (torch, "manual_seed", "torch.manual_seed"),
        (torch.random, "manual_seed", "torch.manual_seed"),
        (random, "seed", "random.seed"),
    ]
    if "numpy" in sys.modules:  # torch imports it; its random module loads on first use
        try:
            functions.append((importlib.import_module("numpy.random"), "seed", "numpy.random.seed"))
        except ImportError:
            pass
    return functions


class Seeds:
    """``add``: where the finding goes (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.wrappers = Wrappers()
        self.given: dict[str, Any] = {}  # generator -> the last seed given since the last step
        self.where = ""
        self.last: dict[str, Any] = {}  # the seeds of the last step that was seeded
        self.steps = 0  # steps in a row that gave a generator the seed of the step before
        self.reported = False
        self.forked = 0  # inside torch.random.fork_rng: torch's generators are restored after

    def install(self) -> None:
        for owner, attribute, name in _seeding_functions():
            self.wrappers.add(note_function_calls(owner, attribute, self._seeded, label=name))
        original = torch.random.fork_rng
        if not getattr(original, "_treeqa_health", False):
            seeds = weakref.ref(self)

            @contextlib.contextmanager
            def fork_rng(*args: Any, **kwargs: Any) -> Iterator[Any]:
                me = seeds()
                if me is not None:
                    me.forked += 1
                try:
                    with original(*args, **kwargs) as forked:
                        yield forked
                finally:
                    if me is not None:
                        me.forked -= 1

            self.wrappers.add(install_wrapper(torch.random, "fork_rng", original, fork_rng))

    def uninstall(self) -> None:
        self.wrappers.undo()

    def _seeded(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``name`` (``torch.manual_seed``, ``random.seed``...) is called with ``args``."""
        seed = args[0] if args else kwargs.get("seed", kwargs.get("a"))
        if seed is None:  # fresh entropy, not a repeat
            return
        if self.forked and name == "torch.manual_seed":  # a fixed draw, the stream left as it was
            return
        self.given[name] = seed
        if self.steps + 1 >= SEEDED_STEPS:  # the stack is walked only when it may be needed
            self.where = sites.user_site()

    def end_step(self) -> None:
        if not self.given and not self.last:  # no seed this step nor the one before: no streak
            self.steps = 0
            return
        given, self.given = self.given, {}
        repeated = [(name, seed) for name, seed in given.items() if self.last.get(name) == seed]
        self.steps = self.steps + 1 if repeated else (1 if given else 0)
        self.last = given
        if self.steps == SEEDED_STEPS and not self.reported:
            self.reported = True
            name, seed = repeated[-1]
            found = slips.seed_reset_every_step(name, seed, self.steps)
            found.where = self.where
            self.add(found)
