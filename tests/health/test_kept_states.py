"""``state-dict-not-copied``: a best epoch's ``state_dict()`` kept without a copy, loaded back
(the module's own tensors) or saved after more steps; and copies, checkpoints saved as they are
taken, and loads from other modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "state-dict-not-copied"
SCRIPT = """
import copy

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x, y = torch.randn(320, 10), torch.randint(0, 2, (320,))
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
other = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), 1e-2)
best = None
for epoch in range(6):
    for i in range(0, 320, 32):
        loss = F.cross_entropy(model(x[i : i + 32]), y[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    if epoch == KEEP:
        best = TAKE
    EACH
END
"""
PATH = "'{}'"


def script(take: str, end: str, keep: int = 1, each: str = "") -> str:
    return (
        SCRIPT.replace("KEEP", str(keep))
        .replace("TAKE", take)
        .replace("EACH", each)
        .replace("END", end)
    )


@pytest.mark.parametrize(
    ("take", "end"),
    [
        ("model.state_dict()", "model.load_state_dict(best)"),
        ("{k: v.detach() for k, v in model.state_dict().items()}", "model.load_state_dict(best)"),
        ("{k: v.cpu() for k, v in model.state_dict().items()}", "model.load_state_dict(best)"),
        ("model.state_dict()", "torch.save(best, PATH)"),
        ("dict(model.state_dict())", "torch.save(best, PATH)"),
        ("{'epoch': epoch, 'model': model.state_dict()}", "torch.save(best, PATH)"),
        ("{k: v.detach() for k, v in model.state_dict().items()}", "torch.save((6, best), PATH)"),
        # into another model (a fold's best, kept for an ensemble)
        ("model.state_dict()", "other.load_state_dict(best)"),
    ],
)
def test_a_state_kept_without_a_copy_is_named(
    doctor: Doctor, tmp_path: Any, take: str, end: str
) -> None:
    text = script(take, end.replace("PATH", PATH.format(tmp_path / "best.pt")))
    found = doctor(text, CODE)
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert found[0]["evidence"]["taken_at_step"] == 20  # epoch 1's end
    assert found[0]["where"].endswith(f":{len(text.splitlines())}")  # the last line


@pytest.mark.parametrize(
    ("take", "end", "keep", "each"),
    [
        ("copy.deepcopy(model.state_dict())", "model.load_state_dict(best)", 1, ""),
        ("{k: v.clone() for k, v in model.state_dict().items()}", "torch.save(best, PATH)", 1, ""),
        # the best epoch is the last: saved as it was taken
        ("model.state_dict()", "torch.save(best, PATH)", 5, ""),
        # a checkpoint saved as it is taken, each epoch, and loaded from its file
        (
            "None",
            "model.load_state_dict(torch.load(PATH))",
            1,
            "torch.save(model.state_dict(), PATH)",
        ),
        # another model's weights: a target network's sync
        ("None", "other.load_state_dict(model.state_dict())", 1, ""),
        # taken after the last step, loaded back after an evaluation: nothing changed between
        ("None", "best = model.state_dict(); model(x); model.load_state_dict(best)", 1, ""),
    ],
)
def test_copies_and_states_saved_as_taken_are_not_named(
    doctor: Doctor, tmp_path: Any, take: str, end: str, keep: int, each: str
) -> None:
    path = PATH.format(tmp_path / "best.pt")
    text = script(take, end.replace("PATH", path), keep, each.replace("PATH", path))
    assert not doctor(text, CODE)


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script
