"""``seed-reset-every-step``: the same ``torch.manual_seed`` on every step, told from a seed
given once and from a seed of each step's own."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import torch

from treeqa.health.findings import Finding
from treeqa.health.seeds import SEEDED_STEPS, Seeds


def _findings(
    seed_of_step: Callable[[int], int | None],
    steps: int = SEEDED_STEPS,
    seeding: Callable[[int], object] | None = None,
) -> list[str]:
    """``seeding``: the call that seeds (default ``torch.manual_seed``, looked up when called,
    as a script's call is, so that it meets the wrapper)."""
    call = seeding or (lambda seed: torch.manual_seed(seed))
    return [f.code for f in _run(seed_of_step, steps, call)]


def _run(
    seed_of_step: Callable[[int], int | None], steps: int, seeding: Callable[[int], object]
) -> list[Finding]:
    found: list[Finding] = []
    seeds = Seeds(found.append)
    seeds.install()
    try:
        for step in range(steps):
            seed = seed_of_step(step)
            if seed is not None:
                seeding(seed)
            torch.randn(2)
            seeds.end_step()
    finally:
        seeds.uninstall()
    return found


def test_the_same_seed_on_every_step_is_named() -> None:
    assert _findings(lambda step: 0) == ["seed-reset-every-step"]
    assert _findings(lambda step: 0, SEEDED_STEPS - 1) == []
    assert _findings(lambda step: 1234 + step) == []  # each step its own seed
    assert _findings(lambda step: 0 if step == 0 else None) == []  # seeded once
    assert _findings(lambda step: 0 if step % 2 else None, 3 * SEEDED_STEPS) == []


def test_the_wrapper_is_for_the_run_only() -> None:
    original = torch.manual_seed
    _findings(lambda step: 0, 2)
    assert torch.manual_seed is original


def set_seed(seed: int) -> None:
    """The usual helper: every generator at once."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def test_python_and_numpy_seeds_are_seen_too() -> None:
    # Looked up at call time, as a script's `random.seed(0)` is.
    for function, seeding in [
        ("random.seed", lambda seed: random.seed(seed)),
        ("numpy.random.seed", lambda seed: np.random.seed(seed)),
        ("torch.manual_seed", lambda seed: torch.random.manual_seed(seed)),
        ("torch.manual_seed", set_seed),  # the last generator seeded is named
    ]:
        found = _run(lambda step: 0, SEEDED_STEPS, seeding)
        assert [(f.code, f.evidence["function"]) for f in found] == [
            ("seed-reset-every-step", function)
        ]
        assert _findings(lambda step: 7 + step, seeding=seeding) == []
    assert _findings(lambda step: 0, seeding=lambda _: random.seed()) == []  # fresh entropy


def test_one_generator_repeating_is_enough() -> None:
    """Python's generator gets a seed of each step's own; torch's the same one each step."""

    def mixed(step: int) -> None:
        random.seed(step)
        torch.manual_seed(0)

    assert _findings(lambda step: step, seeding=mixed) == ["seed-reset-every-step"]


def test_every_wrapper_is_undone() -> None:
    originals = (torch.manual_seed, torch.random.manual_seed, random.seed, np.random.seed)
    _findings(lambda step: 0, 2)
    assert (torch.manual_seed, torch.random.manual_seed, random.seed, np.random.seed) == originals
