"""``evaluated-copy-at-init``: a copy of the model made before training, evaluated while its
weights are still mostly those it was made with (an average too slow for the run, an update that
writes nothing, a best-model comparison that never holds); and copies that follow the model,
copies read inside every step, copies trained themselves, and a baseline shown beside the
trained model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "evaluated-copy-at-init"
SCRIPT = """
import copy

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

torch.manual_seed(0)
x = torch.randn(1400, 12)
y = (x @ torch.randn(12, 3)).argmax(1)
model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
COPY


def score(m, rows):
    m.eval()
    with torch.no_grad():
        right = (m(x[rows]).argmax(1) == y[rows]).float().mean().item()
    m.train()
    return right


best_loss = float("inf")
for epoch in range(5):
    for i in range(0, 1000, 25):
        loss = nn.functional.cross_entropy(model(x[i : i + 25]), y[i : i + 25])
        opt.zero_grad()
        loss.backward()
        opt.step()
        UPDATE
    EPOCH
FINAL
"""
VALIDATION = "range(1000, 1200)"
TEST = "range(1200, 1400)"
EMA = "ema = copy.deepcopy(model)"
BY_HAND = """with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(DECAY).add_(p, alpha=1 - DECAY)"""
BOTH = f"print(score(model, {VALIDATION}), score(ema, {VALIDATION}))"


def _run(doctor: Doctor, copy: str, update: str, epoch: str, final: str) -> list[dict[str, Any]]:
    script = SCRIPT.replace("COPY", copy).replace("UPDATE", update)
    return doctor(script.replace("EPOCH", epoch).replace("FINAL", final), CODE)


@pytest.mark.parametrize(
    ("copy", "update", "epoch", "final", "written"),
    [
        (EMA, BY_HAND.replace("DECAY", "0.9995"), BOTH, "", True),  # too slow for 200 steps
        (  # an update that binds the loop's name: nothing written
            EMA,
            BY_HAND.replace("e.mul_(DECAY).add_(p, alpha=1 - DECAY)", "e = 0.99 * e + 0.01 * p"),
            BOTH,
            "",
            False,
        ),
        (  # a best-model copy whose comparison never holds, scored on the test rows
            "best = copy.deepcopy(model)",
            "pass",
            f"""val_loss = 1 - score(model, {VALIDATION})
    if val_loss > best_loss:
        best_loss, best = val_loss, copy.deepcopy(model)""",
            f"print(score(best, {TEST}))",
            False,
        ),
        (  # an average made at the first step's end, lazily
            "ema = None",
            """if ema is None:
            ema = copy.deepcopy(model)
        BY_HAND""".replace("BY_HAND", BY_HAND.replace("DECAY", "0.9995")),
            "",
            f"print(score(ema, {TEST}))",
            True,
        ),
        (
            "ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9999))",
            "ema.update_parameters(model)",
            "",
            f"print(score(ema, {TEST}))",
            True,
        ),
    ],
)
def test_a_copy_evaluated_at_its_start_is_named(
    doctor_script: Doctor, copy: str, update: str, epoch: str, final: str, written: bool
) -> None:
    found = _run(doctor_script, copy, update, epoch, final)
    assert len(found) == 1, found
    assert found[0]["evidence"]["written"] is written
    assert found[0]["evidence"]["followed"] < 0.5
    assert found[0]["evidence"]["steps"] >= 20
    assert "script.py" in found[0]["where"]


@pytest.mark.parametrize(
    ("copy", "update", "epoch", "final"),
    [
        (EMA, BY_HAND.replace("DECAY", "0.98"), BOTH, ""),  # an average that follows
        (  # a best-model copy taken as the loss falls, older than the model on purpose
            "best = None",
            "pass",
            f"""val_loss = 1 - score(model, {VALIDATION})
    if val_loss < best_loss:
        best_loss, best = val_loss, copy.deepcopy(model)""",
            f"print(score(best, {TEST}))",
        ),
        (  # a reference at the start, read inside every step (a penalty towards it)
            "reference = copy.deepcopy(model).eval()",
            """with torch.no_grad():
            anchor = reference(x[i : i + 25])""",
            "",
            f"print(score(model, {TEST}), score(reference, {TEST}))",
        ),
        (  # an untrained baseline scored once, beside the trained model
            "baseline = copy.deepcopy(model)",
            "pass",
            "",
            f"print(score(model, {TEST}), score(baseline, {TEST}))",
        ),
        (  # a copy trained by an optimiser of its own
            "twin = copy.deepcopy(model)\nopt2 = torch.optim.SGD(twin.parameters(), lr=0.1)",
            """loss2 = nn.functional.cross_entropy(twin(x[i + 1 : i + 26]), y[i + 1 : i + 26])
        opt2.zero_grad()
        loss2.backward()
        opt2.step()""",
            "",
            f"print(score(twin, {TEST}))",
        ),
        (  # one trained by its own optimiser, its gradients set to None after each step
            "twin = copy.deepcopy(model)\nopt2 = torch.optim.SGD(twin.parameters(), lr=0.1)",
            """loss2 = nn.functional.cross_entropy(twin(x[i + 1 : i + 26]), y[i + 1 : i + 26])
        loss2.backward()
        opt2.step()
        opt2.zero_grad()""",
            "",
            f"print(score(twin, {TEST}))",
        ),
        (  # a best copy made before training, loaded with the best epoch's weights (the first)
            "best = copy.deepcopy(model)",
            "pass",
            f"""val_loss = 1 - score(model, {VALIDATION}) + (epoch > 0)
    if val_loss < best_loss:
        best_loss = val_loss
        best.load_state_dict(model.state_dict())""",
            f"print(score(best, {TEST}))",
        ),
        (  # a reference read on every third step
            "reference = copy.deepcopy(model).eval()",
            """if i % 75 == 0:
            with torch.no_grad():
                anchor = reference(x[i : i + 25])""",
            "",
            f"print(score(model, {TEST}), score(reference, {TEST}))",
        ),
    ],
)
def test_copies_that_follow_train_or_are_meant_to_stay_are_clean(
    doctor_script: Doctor, copy: str, update: str, epoch: str, final: str
) -> None:
    assert _run(doctor_script, copy, update, epoch, final) == []


def test_a_copy_returned_by_a_function_and_gone_at_the_end_is_named(doctor_script: Doctor) -> None:
    """``best = train(model)``, scored inside ``main()``: the copy is gone when the run ends,
    and its last evaluation is judged as it was read."""
    script = SCRIPT.replace("COPY", "").replace("UPDATE", "pass").replace("EPOCH", "")
    script = script.replace("FINAL", "").split("best_loss = float")[0]
    script += f"""

def train():
    best_loss, best = float("inf"), copy.deepcopy(model)
    for epoch in range(5):
        for i in range(0, 1000, 25):
            loss = nn.functional.cross_entropy(model(x[i : i + 25]), y[i : i + 25])
            opt.zero_grad()
            loss.backward()
            opt.step()
        val_loss = 1 - score(model, {VALIDATION})
        if val_loss > best_loss:
            best_loss, best = val_loss, copy.deepcopy(model)
    return best


def main():
    print(score(train(), {TEST}))


main()
"""
    found = doctor_script(script, CODE)
    assert len(found) == 1, found
    assert found[0]["evidence"]["written"] is False
