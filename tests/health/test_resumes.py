"""``optimiser-state-not-loaded``: a resumed run whose checkpoint's optimiser state was left
unloaded (``resumes.py``), across two invocations of one script as a restart runs it, and the
checkpoints that are no such resume."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from treeqa.health import run_doctor
from treeqa.health.resumes import RECENT, Resumes, steps_taken

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
        "states": [
            {"key": "under 'optimizer'", "steps_in_checkpoint": 30, "parameters": 4},
            {"scheduler_key": "under 'scheduler'", "scheduler_step_in_checkpoint": 30},
        ]
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
    assert "(no scheduler.load_state_dict call): its schedule starts over" in found[0]["message"]
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
    assert found["evidence"]["states"][0]["key"] == "under 'optimizer'"


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
    resumes.module_loaded(model, checkpoint["model"])
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    resumes.stepped(optimizer, 1, live=False)
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
    resumes.stepped(fresh, 1, live=False)
    assert [f.code for f in found] == ["optimiser-state-not-loaded"]


def test_an_optimiser_over_parameters_no_checkpoint_loaded_is_not_judged() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    checkpoint = saved(model, torch.optim.Adam(model.parameters()))
    found: list[Any] = []
    resumes = Resumes(found.append)
    resumes.checkpoint(checkpoint)
    teacher, student = (nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)) for _ in "ts")
    teacher.load_state_dict(checkpoint["model"])
    resumes.module_loaded(teacher, checkpoint["model"])
    optimizer = torch.optim.Adam(student.parameters())
    student(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    resumes.stepped(optimizer, 1, live=False)
    assert found == []


CASES = """
import copy, os, sys, warnings
import safetensors.torch
import torch
from torch import nn

torch.manual_seed(0)
folder, case = sys.argv[1], sys.argv[2]
x = torch.randn(256, 8)
y = x[:, :3].argmax(1)


def net():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def train(model, opt, steps, schedule=None, extra=None):
    for _ in range(steps):
        i = torch.randint(0, 256, (32,))
        logits = model(x[i]) * (extra.exp() if extra is not None else 1)
        loss = nn.functional.cross_entropy(logits, y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if schedule is not None:
            schedule.step()


def path(name):
    return os.path.join(folder, f"{case}-{name}")


class Pretrained(nn.Sequential):  # keeps the folder it was read from, as transformers' models do
    name_or_path = ""


if case.startswith("files"):  # the transformers Trainer's layout: one file a state
    model = net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    train(model, opt, 20, schedule)
    for name, obj in (("model.pt", model), ("optimizer.pt", opt), ("scheduler.pt", schedule)):
        torch.save(obj.state_dict(), path(name))
    model = net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    order = ["optimizer.pt", "model.pt"] if case == "files optimiser first" else ["model.pt", "optimizer.pt"]
    states = {name: torch.load(path(name)) for name in [*order, "scheduler.pt"]}
    model.load_state_dict(states["model.pt"])
    if case == "files all":
        opt.load_state_dict(states["optimizer.pt"])
    schedule.load_state_dict(states["scheduler.pt"])
    train(model, opt, 20, schedule)
elif case.startswith("apart"):  # one file a state; a second invocation resumes
    run = os.path.join(folder, "run")
    resuming = os.path.exists(os.path.join(run, "optimizer.pt"))
    out = os.path.join(folder, "run2") if case == "apart, saved elsewhere" and resuming else run
    os.makedirs(out, exist_ok=True)

    def save(obj, name):
        target = os.path.join(out, name)
        if case == "apart, open files":
            with open(target, "wb") as f:  # (emptied before torch.save writes)
                torch.save(obj.state_dict(), f)
        elif case == "apart, atomic":
            torch.save(obj.state_dict(), target + ".tmp")
            os.replace(target + ".tmp", target)
        elif name == "model.pt" and case.startswith(("apart, safetensors", "apart, from a folder")):
            safetensors.torch.save_file(obj.state_dict(), os.path.join(out, "model.safetensors"))
        else:
            torch.save(obj.state_dict(), target)

    model = net()
    if case.startswith("apart, from a folder"):  # transformers' from_pretrained, as it reads
        model = Pretrained(*net())
    if resuming and case.startswith("apart, from a folder"):
        with safetensors.safe_open(os.path.join(run, "model.safetensors"), "pt") as f:
            model.name_or_path = run
            weights = {k: f.get_tensor(k) for k in f.keys()}
    elif resuming and case == "apart, safetensors":
        weights = safetensors.torch.load_file(os.path.join(run, "model.safetensors"))
    elif resuming:
        weights = torch.load(os.path.join(run, "model.pt"))
    if resuming and case == "apart, a new head":  # fine-tuning the body for 5 classes
        model[2] = nn.Linear(16, 5)
    if resuming and case in ("apart, a new head", "apart, head reset"):
        weights = {k: v for k, v in weights.items() if not k.startswith("2.")}
    if resuming:
        model.load_state_dict(weights, strict=case not in ("apart, a new head", "apart, head reset"))
    if case == "apart, a teacher" and not resuming:  # weights alone, apart: a student's start
        os.makedirs(os.path.join(folder, "base"), exist_ok=True)
        torch.save(net().state_dict(), os.path.join(folder, "base", "model.pt"))
    if resuming and case == "apart, a teacher":  # the run's model teaches a student started apart
        teacher, model = model.eval(), net()
        model.load_state_dict(torch.load(os.path.join(folder, "base", "model.pt")))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if resuming and case == "apart, Adam then SGD":  # the second phase with SGD, on purpose
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if resuming and case in ("apart, the optimiser read", "apart, epoch start", "apart, from a folder, all read"):
        opt.load_state_dict(torch.load(os.path.join(run, "optimizer.pt")))
    schedule = torch.optim.lr_scheduler.StepLR(opt, 5)
    if resuming and case == "apart, from a folder, all read":
        schedule.load_state_dict(torch.load(os.path.join(run, "scheduler.pt")))
    if case == "apart, epoch start":  # the schedule stepped at the start of each epoch
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(4):
                schedule.step()
                train(model, opt, 5)
    else:
        train(model, opt, 20, schedule)
    save(model, "model.pt")
    save(opt, "optimizer.pt")
    save(schedule, "scheduler.pt")
elif case == "rewind":  # each round from the initial weights the run saved itself
    model = net()
    torch.save(model.state_dict(), path("init.pt"))
    for _ in range(3):
        model.load_state_dict(torch.load(path("init.pt")))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        train(model, opt, 10)
        torch.save(opt.state_dict(), path("optimizer.pt"))
elif case == "sequential":  # a warm-up then cosine, in one checkpoint
    def schedule_of(opt):
        warm = torch.optim.lr_scheduler.LinearLR(opt, 0.1, total_iters=5)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 30)
        return torch.optim.lr_scheduler.SequentialLR(opt, [warm, cosine], milestones=[5])

    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    schedule = schedule_of(opt)
    train(model, opt, 20, schedule)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": schedule.state_dict()}, path("ckpt.pt"))
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    schedule = schedule_of(opt)
    ckpt = torch.load(path("ckpt.pt"))
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    train(model, opt, 20, schedule)
elif case == "rebuilt":  # the state loaded, then the optimiser built again over the model
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(model, opt, 20)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path("ckpt.pt"))
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ckpt = torch.load(path("ckpt.pt"))
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)  # the loaded state goes with the old one
    train(model, opt, 20)
elif case == "own state reloaded":  # accelerate's prepare: a fresh optimiser reloads its own
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(model, opt, 20)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path("ckpt.pt"))
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    opt.load_state_dict(opt.state_dict())
    model.load_state_dict(torch.load(path("ckpt.pt"))["model"])
    train(model, opt, 20)
elif case == "a new head":  # fine-tuning from a whole checkpoint: a fresh optimiser, schedule
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.StepLR(opt, 5)
    train(model, opt, 20, schedule)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": schedule.state_dict()}, path("ckpt.pt"))
    model = net()
    body = {k: v for k, v in torch.load(path("ckpt.pt"))["model"].items() if k.startswith("0.")}
    model.load_state_dict(body, strict=False)
    model[2] = nn.Linear(16, 5)  # a head of its own for the new task
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(model, opt, 20, torch.optim.lr_scheduler.StepLR(opt, 5))
elif case.startswith("gan"):  # two models, two optimisers, one checkpoint
    g, d = net(), net()
    opt_g, opt_d = (torch.optim.Adam(m.parameters(), lr=1e-3) for m in (g, d))
    for _ in range(10):
        train(d, opt_d, 1)
        train(g, opt_g, 1)
    torch.save({"G": g.state_dict(), "D": d.state_dict(), "optG": opt_g.state_dict(),
                "optD": opt_d.state_dict()}, path("ckpt.pt"))
    g, d = net(), net()
    opt_g, opt_d = (torch.optim.Adam(m.parameters(), lr=1e-3) for m in (g, d))
    ckpt = torch.load(path("ckpt.pt"))
    g.load_state_dict(ckpt["G"])
    d.load_state_dict(ckpt["D"])
    if case == "gan D forgotten":
        opt_g.load_state_dict(ckpt["optG"])
    for _ in range(10):
        train(d, opt_d, 1)
        train(g, opt_g, 1)
elif case == "folds":  # each fold starts from the same weights, kept in memory
    model = net()
    init = copy.deepcopy(model.state_dict())
    for fold in range(3):
        model.load_state_dict(init)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        train(model, opt, 15)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path("best.pt"))
        scored = net()
        scored.load_state_dict(torch.load(path("best.pt"))["model"])
elif case == "rollback":  # back to the best weights mid-run, the optimiser kept
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(model, opt, 15)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path("best.pt"))
    train(model, opt, 15)
    model.load_state_dict(torch.load(path("best.pt"))["model"])
    train(model, opt, 15)
elif case == "fast-forward":  # the scheduler stepped on to the saved step, not loaded
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    train(model, opt, 20, schedule)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": schedule.state_dict(), "step": 20}, path("ckpt.pt"))
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    ckpt = torch.load(path("ckpt.pt"))
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    with warnings.catch_warnings():  # (torch's: a scheduler stepped before any optimiser)
        warnings.simplefilter("ignore")
        for _ in range(ckpt["step"]):
            schedule.step()
    train(model, opt, 20, schedule)
elif case in ("momentum", "temperature"):  # SGD's momentum; a bare parameter beside the model
    model = net()
    extra = nn.Parameter(torch.zeros(())) if case == "temperature" else None
    params = [*model.parameters(), *([extra] if extra is not None else [])]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    train(model, opt, 20, extra=extra)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "extra": extra}, path("ckpt.pt"))
    model = net()
    extra = nn.Parameter(torch.zeros(())) if case == "temperature" else None
    params = [*model.parameters(), *([extra] if extra is not None else [])]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    ckpt = torch.load(path("ckpt.pt"))
    model.load_state_dict(ckpt["model"])
    if extra is not None:
        with torch.no_grad():
            extra.copy_(ckpt["extra"])
    train(model, opt, 20, extra=extra)
"""

EXPECTED_CASES = {
    "files model first": ["optimizer"],
    "files optimiser first": ["optimizer"],
    "files all": [],
    "apart": ["optimizer.pt", "scheduler.pt"],
    "apart, saved elsewhere": ["optimizer.pt", "scheduler.pt"],
    "apart, open files": ["optimizer.pt", "scheduler.pt"],
    "apart, atomic": ["optimizer.pt", "scheduler.pt"],
    "apart, safetensors": ["optimizer.pt", "scheduler.pt"],
    "apart, from a folder": ["optimizer.pt", "scheduler.pt"],
    "apart, from a folder, all read": [],
    "apart, a teacher": [],
    "apart, the optimiser read": ["scheduler.pt"],
    "apart, epoch start": ["scheduler.pt"],
    "apart, a new head": [],
    "apart, head reset": [],
    "apart, Adam then SGD": [],
    "rewind": [],
    "sequential": ["scheduler", "scheduler"],  # its warm-up's and its cosine's
    "own state reloaded": ["optimizer"],
    "rebuilt": ["optimizer"],
    "a new head": [],
    "gan both fresh": ["optD", "optG"],
    "gan D forgotten": ["optD"],
    "folds": [],
    "rollback": [],
    "fast-forward": [],
    "momentum": ["optimizer"],
    "temperature": ["optimizer"],
}
"""Each way of saving and resuming: where in the checkpoint the states left unloaded are."""


@pytest.mark.parametrize("case", list(EXPECTED_CASES))
def test_each_way_of_resuming_names_the_states_left_unloaded(case: str, tmp_path: Path) -> None:
    script = tmp_path / "resume.py"
    script.write_text(CASES)
    for _ in range(2 if case.startswith("apart") else 1):  # (the first of two saves)
        _, report = run_doctor(["python", str(script), str(tmp_path), case], stream=io.StringIO())
    found = [f for f in report["findings"] if f["code"] == "optimiser-state-not-loaded"]
    states = [e for f in found for e in f["evidence"].get("states", [f["evidence"]])]
    keys = [e.get("key") or e["scheduler_key"] for e in states]
    keys = sorted(k.split("'")[1] if "'" in k else "optimizer" for k in keys)
    assert keys == EXPECTED_CASES[case], [f["message"] for f in found]
    if case == "momentum":
        assert "its momentum restarts at zero" in found[0]["message"]
    if case == "rebuilt":
        assert "(its state went to an optimiser since rebuilt)" in found[0]["message"]
    if case == "apart, from a folder":  # said at the line that read the folder's weights
        line = int(found[0]["where"].rsplit(":", 1)[1])
        assert "safe_open" in CASES.splitlines()[line - 1], found[0]["where"]
        assert "from_pretrained reads the folder's weights alone" in found[0]["message"]


def test_an_optimiser_loaded_before_a_later_load_stays_loaded_and_files_read_one_by_one_are_let_go() -> (
    None
):
    """Its state loaded as a copy (no claim by identity), then the scheduler's file read: the
    optimiser is still no fresh one. A dataset read file by file keeps only the last loads."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    checkpoint = saved(model, torch.optim.Adam(model.parameters()))
    found: list[Any] = []
    resumes = Resumes(found.append)
    resumes.checkpoint(checkpoint)
    resumed = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    resumed.load_state_dict(checkpoint["model"])
    resumes.module_loaded(resumed, checkpoint["model"])
    optimizer = torch.optim.Adam(resumed.parameters())
    optimizer.load_state_dict(copy.deepcopy(checkpoint["optimizers"][0]))
    resumes.optimiser_loaded(optimizer, copy.deepcopy(checkpoint["optimizers"][0]))
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 10)
    for _ in range(3):
        schedule.step()
    resumes.checkpoint({"scheduler": schedule.state_dict()})
    for i in range(100):
        resumes.checkpoint({"x": torch.zeros(2), "label": i})
    assert len(resumes.recent) == RECENT
    resumed(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    resumes.stepped(optimizer, 1, live=False)
    assert found == []


def test_an_optimiser_file_beside_the_weights_is_read_safely_in_either_format(
    tmp_path: Path,
) -> None:
    """The file of the name the run saves its optimiser as, beside the weights and never read,
    is read with ``weights_only``: torch's zip format memory-mapped, the legacy one as it is;
    a file torch cannot read, or one that holds pickled objects, holds no state we can tell."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    state = saved(model, torch.optim.Adam(model.parameters()))["optimizers"][0]
    written = {
        "zip": lambda f: torch.save(state, f),
        "legacy": lambda f: torch.save(state, f, _use_new_zipfile_serialization=False),
        "not torch's": lambda f: f.write_bytes(b"not a checkpoint\n"),
        "pickled object": lambda f: torch.save({**state, "how": Path("x")}, f),
    }
    for kind, write in written.items():
        folder = tmp_path / kind.replace(" ", "-")
        folder.mkdir()
        torch.save(model.state_dict(), folder / "model.pt")
        write(folder / "optimizer.pt")
        found: list[Any] = []
        resumes = Resumes(found.append)
        weights = torch.load(folder / "model.pt")
        resumes.checkpoint(weights, folder / "model.pt")
        fresh = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
        fresh.load_state_dict(weights)
        resumes.module_loaded(fresh, weights)
        optimizer = torch.optim.Adam(fresh.parameters())
        fresh(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        resumes.stepped(optimizer, 1, live=False)
        readable = kind in ("zip", "legacy")
        assert [f.code for f in found] == ["optimiser-state-not-loaded"] * readable, kind
        if readable:
            assert found[0].evidence["key"] == "in 'optimizer.pt' beside it, never read"
