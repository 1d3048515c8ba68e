"""``gradients-off-by-loss-scale``: a scaled loss's gradients stepped without the scaler, and an
unscaled loss's stepped through it; and the recipes that go through the scaler both ways."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "gradients-off-by-loss-scale"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(640, 10)
y = (x[:, 0] > 0).long()
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cpu"ENABLED)
for step in range(40):
    i = step % 10 * 64
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
    opt.zero_grad()
STEP
"""
RIGHT = """    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()"""


def _script(step: str, enabled: str = "") -> str:
    return SCRIPT.replace("STEP", step).replace("ENABLED", enabled)


def test_a_scaled_loss_stepped_without_the_scaler_is_named_at_the_step(doctor: Doctor) -> None:
    script = _script("    scaler.scale(loss).backward()\n    opt.step()  # here")
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert found[0]["evidence"]["gradients"] == "scaled"
    assert found[0]["evidence"]["loss_scale"] == 65536.0
    assert found[0]["where"].endswith(f":{script.splitlines().index('    opt.step()  # here') + 1}")


def test_an_unscaled_loss_stepped_through_the_scaler_is_named_at_its_backward(
    doctor: Doctor,
) -> None:
    lines = "    scaled = scaler.scale(loss)\n    loss.backward()  # here\n    scaler.step(opt)\n"
    script = _script(lines + "    scaler.update()")
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["evidence"]["gradients"] == "not scaled"
    assert found[0]["where"].endswith(
        f":{script.splitlines().index('    loss.backward()  # here') + 1}"
    )


def test_micro_batches_of_which_only_the_last_was_scaled_are_named(doctor: Doctor) -> None:
    lines = (
        "    if step % 4 == 3:\n        scaler.scale(loss).backward()\n        scaler.step(opt)\n"
        "        scaler.update()\n        opt.zero_grad()\n    else:\n        loss.backward()  # here"
    )
    script = _script(lines).replace("    opt.zero_grad()\n    if step", "    if step")
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["evidence"]["gradients"] == "not scaled"
    assert found[0]["where"].endswith(
        f":{script.splitlines().index('        loss.backward()  # here') + 1}"
    )


@pytest.mark.parametrize(
    "step",
    [
        RIGHT,
        # unscaled to clip, then stepped through the scaler
        "    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    scaler.step(opt)\n    scaler.update()",
        # accumulation: every micro-batch scaled, a step through the scaler every 4th
        "    scaler.scale(loss / 4).backward()\n    if step % 4 == 3:\n"
        "        scaler.step(opt)\n        scaler.update()\n        opt.zero_grad()",
    ],
)
def test_the_recipes_through_the_scaler_are_not_named(doctor: Doctor, step: str) -> None:
    script = _script(step)
    if "step % 4" in step:  # the gradients zeroed after each step, not before each batch
        script = script.replace("    opt.zero_grad()\n    scaler.scale", "    scaler.scale")
    assert not doctor(script, CODE)


def test_a_disabled_scaler_beside_a_plain_step_is_not_named(doctor: Doctor) -> None:
    step = "    scaler.scale(loss).backward()\n    opt.step()"
    assert not doctor(_script(step, ", enabled=False"), CODE)


GAN = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
G, D = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)), nn.Linear(2, 1)
opt_g = torch.optim.Adam(G.parameters(), 1e-3)
opt_d = torch.optim.Adam(D.parameters(), 1e-3)
scaler = torch.amp.GradScaler("cpu")
for step in range(40):
    real, fake = torch.randn(32, 2) + 2, G(torch.randn(32, 4))
    ones, zeros = torch.ones(32, 1), torch.zeros(32, 1)
    d_loss = F.binary_cross_entropy_with_logits(D(real), ones) + F.binary_cross_entropy_with_logits(D(fake.detach()), zeros)
    opt_d.zero_grad()
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    g_loss = F.binary_cross_entropy_with_logits(D(fake), ones)
    opt_g.zero_grad()
G_STEP
    scaler.update()
"""


def test_a_generators_step_is_judged_by_its_own_loss(doctor: Doctor) -> None:
    """After the critic's scaled step, a generator's loss backpropagated as it is and stepped
    directly is right; scaled and stepped directly, named."""
    plain = "    g_loss.backward()\n    opt_g.step()"
    assert not doctor(GAN.replace("G_STEP", plain), CODE)
    scaled = "    scaler.scale(g_loss).backward()\n    opt_g.step()"
    found = doctor(GAN.replace("G_STEP", scaled), CODE)
    assert len(found) == 1 and found[0]["evidence"]["optimizer"] == "Adam"
    both = "    scaler.scale(g_loss).backward()\n    scaler.step(opt_g)"
    assert not doctor(GAN.replace("G_STEP", both), CODE)


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script
