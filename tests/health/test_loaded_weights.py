"""``loaded-weights-not-trained``: weights loaded before training and then initialised again,
or loaded into a model that is not the one trained; and loads that training starts from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from treeqa.health.loaded import _kept, _moved

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "loaded-weights-not-trained"
HEAD = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x, y = torch.randn(256, 8), torch.randint(0, 3, (256,))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.body(x))


def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def train(model, steps=40):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        i = torch.randint(0, 256, (32,))
        loss = F.cross_entropy(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()


pretrained = Net()
with torch.no_grad():
    for p in pretrained.parameters():
        p.add_(torch.randn_like(p))
path = "{path}"
torch.save(pretrained.state_dict(), path)
"""


def _doctor(tmp_path: Path, doctor_script: Doctor, body: str) -> list[dict[str, Any]]:
    return doctor_script(HEAD.replace("{path}", str(tmp_path / "pre.pt")) + body, CODE)


def test_an_init_applied_after_the_load_is_named_at_its_line(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    body = "model = Net()\nmodel.load_state_dict(torch.load(path))\nmodel.apply(init_weights)\n"
    found = _doctor(tmp_path, doctor_script, body + "train(model)\n")
    assert len(found) == 1
    assert found[0]["severity"] == "error"
    assert found[0]["where"].endswith("script.py:22")  # nn.init.xavier_uniform_, in init_weights
    assert found[0]["evidence"]["tensors_written_over"] == 6
    assert found[0]["evidence"]["loaded_at"].endswith("script.py:43")


def test_the_init_before_the_load_is_clean(tmp_path: Path, doctor_script: Doctor) -> None:
    body = "model = Net()\nmodel.apply(init_weights)\nmodel.load_state_dict(torch.load(path))\n"
    assert _doctor(tmp_path, doctor_script, body + "train(model)\n") == []


def test_weights_written_through_data_are_found_without_a_line_of_their_own(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    body = (
        "model = Net()\nmodel.load_state_dict(torch.load(path))\n"
        "for p in model.parameters():\n    p.data.normal_(0, 0.02)\ntrain(model)\n"
    )
    found = _doctor(tmp_path, doctor_script, body)
    assert len(found) == 1
    assert "not by an nn.init function" in found[0]["message"]
    assert found[0]["where"].endswith("script.py:43")  # the load


def test_a_new_head_initialised_after_the_load_is_clean(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    body = (
        "model = Net()\nmodel.load_state_dict(torch.load(path))\n"
        "model.head.apply(init_weights)\nmodel.head = nn.Linear(32, 3)\ntrain(model)\n"
    )
    assert _doctor(tmp_path, doctor_script, body) == []


def test_a_second_load_over_the_first_and_a_cast_are_no_overwrite(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    body = (
        "model = Net()\nmodel.load_state_dict(torch.load(path))\n"
        "model.load_state_dict(Net().state_dict())\n"
        "model.to(torch.bfloat16).to(torch.float32)\ntrain(model)\n"
    )
    assert _doctor(tmp_path, doctor_script, body) == []


def test_a_model_built_again_after_the_load_is_found_at_the_end(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    body = "model = Net()\nmodel.load_state_dict(torch.load(path))\nmodel = Net()\ntrain(model)\n"
    found = _doctor(tmp_path, doctor_script, body)
    assert len(found) == 1
    assert found[0]["where"].endswith("script.py:43")
    assert found[0]["evidence"]["freed"] is True
    assert "never ran" in found[0]["message"]


def test_a_loaded_teacher_that_runs_beside_a_student_is_clean(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    body = (
        "teacher = Net()\nteacher.load_state_dict(torch.load(path))\nstudent = Net()\n"
        "opt = torch.optim.SGD(student.parameters(), lr=0.05)\n"
        "for step in range(40):\n"
        "    with torch.no_grad():\n        soft = teacher(x[:32]).softmax(1)\n"
        "    loss = F.cross_entropy(student(x[:32]), soft)\n"
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
    )
    assert _doctor(tmp_path, doctor_script, body) == []


def test_a_baseline_loaded_and_scored_after_training_is_clean(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    body = (
        "baseline = Net()\nbaseline.load_state_dict(torch.load(path))\nmodel = Net()\n"
        "train(model)\nwith torch.no_grad():\n    print(baseline(x).argmax(1).eq(y).float().mean())\n"
    )
    assert _doctor(tmp_path, doctor_script, body) == []


def test_kept_values_move_with_a_new_init_and_not_with_rounding() -> None:
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(64, 64))
    (kept,) = _kept([weight])
    with torch.no_grad():
        weight.copy_(weight.to(torch.bfloat16).float())
    assert not _moved(kept)
    with torch.no_grad():
        weight.mul_(0.5).add_(0.01 * torch.randn_like(weight))  # shrunk and perturbed
    assert not _moved(kept)
    with torch.no_grad():
        torch.nn.init.kaiming_uniform_(weight)
    assert _moved(kept)
    with torch.no_grad():
        torch.nn.init.zeros_(weight)
    assert _moved(kept)


def test_an_init_in_the_loops_first_iteration_after_its_step_is_found_at_the_second(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    body = (
        "model = Net()\nmodel.load_state_dict(torch.load(path))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.05)\n"
        "for step in range(40):\n"
        "    loss = F.cross_entropy(model(x[:32]), y[:32])\n"
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
        "    if step == 0:\n        model.apply(init_weights)\n"
    )
    found = _doctor(tmp_path, doctor_script, body)
    assert len(found) == 1
    assert found[0]["evidence"]["optimiser_steps_before"] == 1


def test_a_head_larger_than_the_body_initialised_again_is_clean(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    # The last two of four layers re-initialised on purpose: 84% of the values, none of the
    # first layers.
    body = (
        "def deep():\n"
        "    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), "
        "nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 3))\n"
        "torch.save(deep().state_dict(), path)\n"
        "model = deep()\nmodel.load_state_dict(torch.load(path))\n"
        "model[4].apply(init_weights)\nmodel[6].apply(init_weights)\ntrain(model)\n"
    )
    assert _doctor(tmp_path, doctor_script, body) == []
    written = body.replace("model[4].apply", "model[0].apply(init_weights)\nmodel[4].apply")
    # (a first layer as well: found)
    assert len(_doctor(tmp_path, doctor_script, written)) == 1


def test_a_loaded_model_beside_a_new_one_its_optimiser_grouped_head_first_is_found(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    body = (
        "pretrained_net = Net()\npretrained_net.load_state_dict(torch.load(path))\n"
        "net = Net()\n"
        "opt = torch.optim.SGD([{'params': net.head.parameters()}, "
        "{'params': net.body.parameters(), 'lr': 0.01}], lr=0.05)\n"
        "for step in range(40):\n"
        "    loss = F.cross_entropy(net(x[:32]), y[:32])\n"
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
    )
    found = _doctor(tmp_path, doctor_script, body)
    assert len(found) == 1 and found[0]["evidence"]["freed"] is False


def test_a_loaded_model_read_through_its_state_dict_is_used(
    tmp_path: Path, doctor_script: Doctor
) -> None:
    # A baseline trained from scratch first, then the loaded body's tensors copied by hand.
    body = (
        "pretrained_net = Net()\npretrained_net.load_state_dict(torch.load(path))\n"
        "train(Net())\n"
        "probe = Net()\nprobe.body.load_state_dict({k[5:]: v for k, v in "
        "pretrained_net.state_dict().items() if k.startswith('body.')})\n"
    )
    assert _doctor(tmp_path, doctor_script, body) == []
