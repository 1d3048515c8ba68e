"""``seed-reset-every-step``: the same ``torch.manual_seed`` on every step, told from a seed
given once and from a seed of each step's own."""

from __future__ import annotations

from collections.abc import Callable

import torch

from treeqa.health.checks import Finding
from treeqa.health.seeds import SEEDED_STEPS, Seeds


def _findings(seed_of_step: Callable[[int], int | None], steps: int = SEEDED_STEPS) -> list[str]:
    found: list[Finding] = []
    seeds = Seeds(found.append)
    seeds.install()
    try:
        for step in range(steps):
            seed = seed_of_step(step)
            if seed is not None:
                torch.manual_seed(seed)
            torch.randn(2)
            seeds.end_step()
    finally:
        seeds.uninstall()
    return [f.code for f in found]


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
