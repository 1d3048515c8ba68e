"""``optimiser-state-not-loaded``: a resumed run whose checkpoint's optimiser state was left
unloaded (``resumes.py``), across two invocations of one script as a restart runs it, and the
checkpoints that are no such resume."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from torch import nn

from treeqa.health import run_doctor
from treeqa.health.resumes import Resumes, steps_taken

SCRIPT = """
import sys
import torch
from torch import nn

torch.manual_seed(0)
path, how = sys.argv[1], sys.argv[2]
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
start = 0
if how != "first":
    checkpoint = torch.load(path)
    if how == "lightning":  # a list of states under a key, as Lightning saves them
        model.load_state_dict(checkpoint["state_dict"])
    else:
        model.load_state_dict(checkpoint["model"])
    if how in ("both", "optimiser"):
        opt.load_state_dict(checkpoint["optimizer"])
    if how == "both":
        schedule.load_state_dict(checkpoint["scheduler"])
    start = checkpoint.get("step", 0)
for step in range(start + 1, start + 31):
    x = torch.randn(16, 8)
    loss = nn.functional.cross_entropy(model(x), x[:, :3].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    schedule.step()
state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
state["scheduler"] = schedule.state_dict()
if how == "first":
    state["state_dict"], state["optimizer_states"] = state["model"], [state["optimizer"]]
    torch.save(state, path)
"""


def codes(report: dict[str, Any]) -> list[str]:
    return [f["code"] for f in report["findings"]]


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The reports of a script resumed from its first run's checkpoint, each way."""
    folder = tmp_path_factory.mktemp("resume")
    script, checkpoint = folder / "train.py", str(folder / "checkpoint.pt")
    script.write_text(SCRIPT)
    return {
        how: run_doctor(["python", str(script), checkpoint, how], stream=io.StringIO())[1]
        for how in (
            "first",
            "weights",
            "both",
            "optimiser",
            "lightning",
        )  # (the first saves the checkpoint)
    }


def test_a_restart_that_loads_only_the_weights_is_found_at_its_first_step(
    resumed: dict[str, dict[str, Any]],
) -> None:
    found = [f for f in resumed["weights"]["findings"] if f["code"] == "optimiser-state-not-loaded"]
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert found[0]["where"].endswith("train.py:13")  # checkpoint = torch.load(path)
    assert found[0]["evidence"] == {
        "key": "under 'optimizer'",
        "steps_in_checkpoint": 30,
        "parameters": 4,
        "scheduler_key": "under 'scheduler'",
        "scheduler_step_in_checkpoint": 30,
    }
    assert "the AdamW training them and the CosineAnnealingLR stepping it" in found[0]["message"]
    assert found[0]["first_step"] == 1  # its state never loaded: numbered from 1, not 31


def test_a_restart_that_loads_the_optimiser_but_not_its_scheduler_is_found(
    resumed: dict[str, dict[str, Any]],
) -> None:
    found = [
        f for f in resumed["optimiser"]["findings"] if f["code"] == "optimiser-state-not-loaded"
    ]
    assert len(found) == 1
    assert found[0]["evidence"] == {
        "scheduler_key": "under 'scheduler'",
        "scheduler_step_in_checkpoint": 30,
    }
    assert "(no scheduler.load_state_dict call): the schedule starts over" in found[0]["message"]
    assert found[0]["first_step"] == 31  # the optimiser's state numbers the steps on


def test_a_restart_that_loads_the_optimisers_state_too_is_clean_and_numbered_on(
    resumed: dict[str, dict[str, Any]],
) -> None:
    """An optimiser's state loaded before the first step holds the steps taken (Adam's
    ``step``): the report numbers the resumed run's steps on from there, as the script does."""
    report = resumed["both"]
    assert "optimiser-state-not-loaded" not in codes(report)
    assert (report["resumed_at"], report["steps"]) == (30, 30)
    assert report["series"]["step"][0] == 31 and report["series"]["step"][-1] == 60
    first = resumed["first"]
    assert (first["resumed_at"], first["steps"], first["series"]["step"][0]) == (0, 30, 1)


def test_a_state_in_a_list_under_a_key_is_found_too(resumed: dict[str, dict[str, Any]]) -> None:
    (found,) = [
        f for f in resumed["lightning"]["findings"] if f["code"] == "optimiser-state-not-loaded"
    ]
    # (the first state found: the dict's own "optimizer" comes before the list)
    assert found["evidence"]["key"] == "under 'optimizer'"


def saved(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int = 3) -> dict[str, Any]:
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    return {"model": model.state_dict(), "optimizers": [optimizer.state_dict()]}


def judged(
    checkpoint: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer
) -> list[str]:
    found: list[Any] = []
    resumes = Resumes(found.append)
    resumes.checkpoint(checkpoint)
    model.load_state_dict(checkpoint["model"])
    resumes.module_loaded(model)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    resumes.stepped(optimizer, 1)
    return [f.code for f in found]


def test_only_a_fresh_optimiser_over_the_loaded_model_laid_out_alike_is_judged() -> None:
    def make(out: int = 3) -> nn.Module:
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, out))

    model = make()
    adam = saved(model, torch.optim.Adam(model.parameters()))
    assert steps_taken(adam["optimizers"][0]) == 3
    fresh = make()
    assert judged(adam, fresh, torch.optim.Adam(fresh.parameters())) == [
        "optimiser-state-not-loaded"
    ]
    # Plain SGD keeps no state: a fresh one is the same.
    model = make()
    sgd = saved(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert sgd["optimizers"][0]["state"] == {}
    fresh = make()
    assert judged(sgd, fresh, torch.optim.SGD(fresh.parameters(), lr=0.1)) == []
    # Two groups (no decay on biases) where the checkpoint's optimiser had one: another layout.
    fresh = make()
    groups = [
        {"params": [p for n, p in fresh.named_parameters() if n.endswith("weight")]},
        {
            "params": [p for n, p in fresh.named_parameters() if n.endswith("bias")],
            "weight_decay": 0,
        },
    ]
    assert judged(adam, fresh, torch.optim.Adam(groups)) == []
    # The saved moments shaped otherwise than these parameters: another model's state.
    wide = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
    other = {
        "model": make().state_dict(),
        "optimizers": saved(wide, torch.optim.Adam(wide.parameters()))["optimizers"],
    }
    fresh = make()
    assert judged(other, fresh, torch.optim.Adam(fresh.parameters())) == []


def test_a_whole_model_saved_beside_its_optimisers_state_is_loaded_with_it() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.Adam(model.parameters())
    checkpoint = {**saved(model, optimizer), "model": model}  # torch.save({"model": model, ...})
    found: list[Any] = []
    resumes = Resumes(found.append)
    resumes.checkpoint(checkpoint)
    fresh = torch.optim.Adam(checkpoint["model"].parameters())
    model(torch.randn(4, 8)).sum().backward()
    fresh.step()
    resumes.stepped(fresh, 1)
    assert [f.code for f in found] == ["optimiser-state-not-loaded"]


def test_an_optimiser_over_parameters_no_checkpoint_loaded_is_not_judged() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    checkpoint = saved(model, torch.optim.Adam(model.parameters()))
    found: list[Any] = []
    resumes = Resumes(found.append)
    resumes.checkpoint(checkpoint)
    teacher, student = (nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)) for _ in "ts")
    teacher.load_state_dict(checkpoint["model"])
    resumes.module_loaded(teacher)
    optimizer = torch.optim.Adam(student.parameters())
    student(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    resumes.stepped(optimizer, 1)
    assert found == []
