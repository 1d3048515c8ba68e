"""``layer-built-in-forward``: a layer with weights (or a dropout's training mode) made anew
in each forward; and layers built once, functions in forward, layers made between forwards and
copies made for an inner loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "layer-built-in-forward"
SCRIPT = """
import copy

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 32)
        self.head = None

    def forward(self, x):
        h = torch.relu(self.body(x))
        LINE
        return self.head(h) if self.head is not None else h[:, :3]


model = Net()
BEFORE
opt = torch.optim.SGD(model.parameters(), 0.05)
x, y = torch.randn(640, 16), torch.randint(0, 3, (640,))
for epoch in range(2):
    for i in range(0, 640, 32):
        loss = F.cross_entropy(model(x[i : i + 32]), y[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    AFTER
"""


@pytest.mark.parametrize(
    ("line", "layer"),
    [
        ("h = nn.Linear(h.size(1), 32)(h)", "Linear"),
        ("self.head = nn.Linear(32, 3)", "Linear"),
        ("h = Block(32)(h)", "Block"),
        ("h = nn.BatchNorm1d(32)(h)", "BatchNorm1d"),
        ("h = h * nn.Parameter(torch.randn(32))", "Parameter"),
    ],
)
def test_a_layer_made_in_each_forward_is_named(doctor: Doctor, line: str, layer: str) -> None:
    script = SCRIPT.replace("LINE", line).replace("BEFORE", "").replace("AFTER", "")
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert found[0]["evidence"]["layer"] == layer
    assert found[0]["where"].endswith(f":{script.splitlines().index('        ' + line) + 1}")
    if layer == "BatchNorm1d":
        assert "evaluation" in found[0]["message"]


@pytest.mark.parametrize(
    ("line", "before", "after"),
    [
        # built once, at the first forward, before the optimiser
        ("self.head = self.head or nn.Linear(32, 3)", "model(torch.randn(2, 16))", ""),
        ("h = nn.ReLU()(nn.Flatten()(h))", "", ""),
        ("h = F.dropout(h, 0.3, self.training)", "", ""),
        ("h = nn.Dropout(0.3).train(self.training)(h)", "", ""),  # it follows the model's mode
        # a fixed kernel set each time; a throwaway layer run without gradients
        ("f = nn.Linear(32, 32); f.weight.data.fill_(0.01); h = f(h)", "", ""),
        ("with torch.no_grad(): n = nn.Linear(32, 2)(h).shape", "", ""),
        # a probe trained between epochs, a copy for an inner loop
        (
            "",
            "",
            "probe = nn.Linear(32, 3); F.mse_loss(probe(torch.randn(4, 32)), torch.zeros(4, 3))",
        ),
        ("", "", "fast = copy.deepcopy(model); fast(x[:8]).sum().backward()"),
    ],
)
def test_layers_built_once_or_outside_a_forward_are_not_named(
    doctor: Doctor, line: str, before: str, after: str
) -> None:
    script = SCRIPT.replace("LINE", line).replace("BEFORE", before).replace("AFTER", after)
    assert not doctor(script, CODE)


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script


LOOP = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
body = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
opt = torch.optim.Adam(body.parameters(), 1e-3)
x, y = torch.randn(640, 16), torch.randint(0, 3, (640,))
for epoch in range(2):
    EPOCH
    for i in range(0, 640, 32):
        STEP
        loss = F.cross_entropy(head(body(x[i : i + 32])), y[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_head_made_in_the_loop_at_each_step_is_named(doctor: Doctor) -> None:
    script = LOOP.replace("EPOCH", "").replace("STEP", "head = nn.Linear(32, 3)")
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["evidence"]["in_forward"] is False
    assert "in the training loop" in found[0]["message"]


def test_a_head_made_once_an_epoch_in_the_loop_is_not_named(doctor: Doctor) -> None:
    script = LOOP.replace("EPOCH", "head = nn.Linear(32, 3)").replace("STEP", "")
    assert not doctor(script, CODE)
