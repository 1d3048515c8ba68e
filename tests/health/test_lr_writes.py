"""``lr-not-applied``: a learning rate written where a torch optimiser does not read it (an
attribute, its defaults after its groups were made, a misnamed group key, a copy of the groups
from ``state_dict()``); and writes that are read, or mirror what is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "lr-not-applied"
HEAD = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(400, 8)
y = x.sum(1, keepdim=True)
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(6):
    lr = 0.01 * 0.5 ** epoch
    WRITE
    for i in range(0, 400, 20):
        loss = F.mse_loss(model(x[i : i + 20]), y[i : i + 20])
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def _run(doctor: Doctor, write: str, head: str = HEAD) -> list[dict[str, Any]]:
    return doctor(head.replace("WRITE", write), CODE)


@pytest.mark.parametrize(
    ("write", "place"),
    [
        ("opt.lr = lr", "attribute lr"),
        ("setattr(opt, 'learning_rate', lr)", "attribute learning_rate"),
        ("opt.defaults['lr'] = lr", "defaults"),
        ("opt.param_groups[0]['learning_rate'] = lr", "key learning_rate"),
        ("opt.state_dict()['param_groups'][0]['lr'] = lr", "copy"),
    ],
)
def test_a_decay_written_where_sgd_does_not_read_it_is_named(
    doctor_script: Doctor, write: str, place: str
) -> None:
    found = _run(doctor_script, write)
    assert len(found) == 1, found
    assert found[0]["evidence"]["place"] == place
    assert found[0]["evidence"]["groups"] == [0.01]
    assert found[0]["where"].endswith(":13")  # the write's line, read from the source


@pytest.mark.parametrize(
    "write",
    [
        "for g in opt.param_groups: g['lr'] = lr",
        "opt.current_lr = opt.param_groups[0]['lr']",  # a mirror for the log
        "opt.param_groups[0]['name'] = 'all'",  # a key of another meaning
        "sd = opt.state_dict(); sd['param_groups'][0]['lr'] = lr; opt.load_state_dict(sd)",
        "opt.lr = 0.01",  # the rate the groups hold
    ],
)
def test_writes_the_optimiser_reads_or_mirrors_are_clean(doctor_script: Doctor, write: str) -> None:
    assert _run(doctor_script, write) == []


def test_a_rate_set_once_is_named_where_the_groups_never_move(doctor_script: Doctor) -> None:
    found = _run(doctor_script, "opt.lr = 0.1 if epoch == 0 else opt.lr")
    assert len(found) == 1 and "never taken" in found[0]["message"], found


def test_an_attribute_set_once_beside_a_scheduler_is_clean(doctor_script: Doctor) -> None:
    head = HEAD.replace(
        "for epoch in range(6):",
        "opt.lr = 0.01\nschedule = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)\n"
        "for epoch in range(6):",
    ).replace("        opt.step()\n", "        opt.step()\n    schedule.step()\n")
    assert _run(doctor_script, "pass", head) == []


def test_a_default_changed_before_a_group_is_added_is_clean(doctor_script: Doctor) -> None:
    head = HEAD.replace(
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)",
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\nextra = nn.Parameter(torch.zeros(1))\n"
        "opt.defaults['lr'] = 0.02\nopt.add_param_group({'params': [extra]})",
    )
    assert _run(doctor_script, "pass", head) == []


def test_an_optimiser_of_the_scripts_own_reading_its_own_key_is_clean(
    doctor_script: Doctor,
) -> None:
    head = HEAD.replace(
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)",
        """
class Plain(torch.optim.Optimizer):
    def __init__(self, params, learning_rate):
        super().__init__(params, {"learning_rate": learning_rate})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["learning_rate"])


opt = Plain(model.parameters(), 0.01)""",
    )
    assert _run(doctor_script, "opt.param_groups[0]['learning_rate'] = lr", head) == []


@pytest.mark.parametrize(
    "write",
    [
        # a base rate the script multiplies into the groups, held flat for a while
        "opt.lr = 0.02\nfor g in opt.param_groups: g['lr'] = opt.lr * min(1, epoch / 3)",
        # a rate logged a step late
        "opt.lr = opt.param_groups[0]['lr']\nfor g in opt.param_groups: g['lr'] = lr",
        # a default changed for a group added later
        "opt.defaults['lr'] = 0.005\nif epoch == 3: opt.add_param_group({'params': [extra]})",
        # a state edited and loaded back, then moved on
        "sd = opt.state_dict(); sd['param_groups'][0]['lr'] = lr * 2; opt.load_state_dict(sd)\n"
        "for g in opt.param_groups: g['lr'] = lr",
    ],
)
def test_a_value_the_scripts_own_schedule_keeps_is_clean(doctor_script: Doctor, write: str) -> None:
    head = HEAD.replace(
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)",
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\nextra = nn.Parameter(torch.zeros(1))",
    )
    body = "\n    ".join(write.splitlines())
    assert _run(doctor_script, body, head) == []
