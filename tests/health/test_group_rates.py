"""``group-rates-flattened``: parameter groups made at rates of their own, run at one from the
first step; and per-group schedules, warm-ups from 0 and rates set alike later on purpose."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "group-rates-flattened"
SCRIPT = """
import math
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(1000, 8)
y = (x @ torch.randn(8, 3)).argmax(1)
body, head = nn.Sequential(nn.Linear(8, 16), nn.ReLU()), nn.Linear(16, 3)
opt = torch.optim.AdamW([{"params": body.parameters(), "lr": 1e-4}, {"params": head.parameters(), "lr": 1e-2}])
SCHEDULER
for step in range(60):
    WRITE
    i = step % 10 * 100
    loss = F.cross_entropy(head(body(x[i : i + 100])), y[i : i + 100])
    opt.zero_grad()
    loss.backward()
    opt.step()
    AFTER
"""
"""A backbone at 1e-4 beside a head at 1e-2: ``WRITE`` before each step, ``AFTER`` after."""
ALIKE = """for g in opt.param_groups:
        g["lr"] = 1e-2 * FACTOR"""
OWN = """for g in opt.param_groups:
        g["lr"] = g.setdefault("base_lr", g["lr"]) * FACTOR"""
WARM_UP = "min(1.0, (step + 1) / 10)"
FROM_ZERO = "min(1.0, step / 10)"


def _script(write: str = "pass", scheduler: str = "", after: str = "pass") -> str:
    return SCRIPT.replace("WRITE", write).replace("SCHEDULER", scheduler).replace("AFTER", after)


def test_a_cut_written_into_every_group_later_is_named(doctor_script: Doctor) -> None:
    """A plateau schedule by hand: the groups train apart for 30 steps, then its first cut
    writes one rate into each."""
    cut = """if step == 30:
        lr = 0.5 * opt.param_groups[1]["lr"]
        for g in opt.param_groups:
            g["lr"] = lr"""
    found = doctor_script(_script(cut), CODE)
    assert len(found) == 1, found
    assert found[0]["evidence"]["step"] == 31
    assert not found[0]["evidence"]["from_the_first_step"]


def test_layer_scales_a_schedule_ignores_are_named(doctor_script: Doctor) -> None:
    """MAE's layer-wise decay: the groups made at one rate, each with an ``lr_scale`` that the
    schedule is meant to apply."""
    made = (
        '[{"params": body.parameters(), "lr_scale": 0.01}, {"params": head.parameters()}], lr=1e-2'
    )
    script = _script(ALIKE.replace("FACTOR", WARM_UP)).replace(
        '[{"params": body.parameters(), "lr": 1e-4}, {"params": head.parameters(), "lr": 1e-2}]',
        made,
    )
    assert len(doctor_script(script, CODE)) == 1
    right = script.replace('g["lr"] = 1e-2 *', 'g["lr"] = 1e-2 * g.get("lr_scale", 1) *')
    assert not doctor_script(right, CODE)


@pytest.mark.parametrize(
    "script",
    [
        _script(ALIKE.replace("FACTOR", WARM_UP)),
        _script(ALIKE.replace("FACTOR", FROM_ZERO)),  # judged at the first step not at 0
        # written after each step, as Lightning's documented warm-up does: the first step alone
        # runs at the groups' own rates
        _script(after=ALIKE.replace("FACTOR", WARM_UP)),
        _script(
            scheduler="sched = torch.optim.lr_scheduler.OneCycleLR(opt, 1e-2, total_steps=60)",
            after="sched.step()",
        ),
    ],
)
def test_groups_run_at_one_rate_from_the_first_step_are_named(
    doctor_script: Doctor, script: str
) -> None:
    found = doctor_script(script, CODE)
    assert len(found) == 1, found
    assert found[0]["evidence"]["rates_made"] == [1e-4, 1e-2]
    if "OneCycleLR" in script:
        assert "max_lr" in found[0]["message"]
    else:
        line = next(n for n, text in enumerate(script.splitlines(), 1) if 'g["lr"] =' in text)
        assert found[0]["where"].endswith(f":{line}")  # the line that writes the rate


@pytest.mark.parametrize(
    "script",
    [
        _script(),
        _script(OWN.replace("FACTOR", WARM_UP)),
        _script(OWN.replace("FACTOR", FROM_ZERO)),
        _script(
            scheduler="sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.99**s)",
            after="sched.step()",
        ),
        # the backbone unfrozen to the head's rate after 30 steps, on purpose
        _script('if step == 30:\n        opt.param_groups[0]["lr"] = 1e-2'),
    ],
)
def test_groups_run_at_their_own_rates_pass(doctor_script: Doctor, script: str) -> None:
    assert not doctor_script(script, CODE)
