"""``batch-norm-shared``: one batch norm called at several places of a forward, on inputs
whose statistics differ, then evaluated in eval mode; and norms shared where that is right
(two views of one distribution, a norm never evaluated, one without running statistics)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from treeqa.health.shared_norms import APART, _gap

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "batch-norm-shared"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.ModuleList(nn.Linear(n, 32) for n in (6, 32, 32))
        NORMS
        self.out = nn.Linear(32, 3)

    def forward(self, x):
        FORWARD
        return self.out(x)


x = torch.randn(1200, 6) * 4 + 2
y = (x @ torch.randn(6, 3)).argmax(1)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    model.train()
    for i in range(0, 1000, 50):
        loss = F.cross_entropy(model(x[i : i + 50]), y[i : i + 50])
        opt.zero_grad()
        loss.backward()
        opt.step()
    EVALUATE
"""
ONE_NORM = "self.norm = nn.BatchNorm1d(32)"
EACH_LAYER = """for layer in self.hidden:
            x = F.relu(self.norm(layer(x)))"""
EVAL_MODE = """model.eval()
    with torch.no_grad():
        accuracy = (model(x[1000:]).argmax(1) == y[1000:]).float().mean()"""


def _run(doctor: Doctor, norms: str, forward: str, evaluate: str = EVAL_MODE) -> list[Any]:
    script = SCRIPT.replace("NORMS", norms).replace("FORWARD", forward)
    return doctor(script.replace("EVALUATE", evaluate), CODE)


@pytest.mark.parametrize(
    ("norms", "forward"),
    [
        (ONE_NORM, EACH_LAYER),
        (  # a list of one module three times
            "self.norms = nn.ModuleList([nn.BatchNorm1d(32)] * 3)",
            """for layer, norm in zip(self.hidden, self.norms):
            x = F.relu(norm(layer(x)))""",
        ),
        (  # the first layer's norm and the last's
            ONE_NORM,
            """x = F.relu(self.norm(self.hidden[0](x)))
        x = F.relu(self.hidden[1](x))
        x = F.relu(self.norm(self.hidden[2](x) * 3))""",
        ),
    ],
)
def test_one_norm_at_several_places_evaluated_in_eval_mode_is_named(
    doctor_script: Doctor, norms: str, forward: str
) -> None:
    found = _run(doctor_script, norms, forward)
    assert len(found) == 1, found
    assert found[0]["evidence"]["calls"] in (2, 3)
    assert found[0]["evidence"]["gap"] >= APART
    assert "script.py" in found[0]["where"]  # the evaluation's line


@pytest.mark.parametrize(
    ("norms", "forward", "evaluate"),
    [
        (  # a norm of its own at each place
            "self.norms = nn.ModuleList(nn.BatchNorm1d(32) for _ in range(3))",
            """for layer, norm in zip(self.hidden, self.norms):
            x = F.relu(norm(layer(x)))""",
            EVAL_MODE,
        ),
        (  # shared, never evaluated in eval mode: its blend is never used
            ONE_NORM,
            EACH_LAYER,
            """with torch.no_grad():
        accuracy = (model(x[1000:]).argmax(1) == y[1000:]).float().mean()""",
        ),
        (  # shared, without running statistics: each call normalises by its batch always
            "self.norm = nn.BatchNorm1d(32, track_running_stats=False)",
            EACH_LAYER,
            EVAL_MODE,
        ),
        (  # a layer norm: no running statistics either
            "self.norm = nn.LayerNorm(32)",
            EACH_LAYER,
            EVAL_MODE,
        ),
        (  # one encoder over two halves of the batch: two views of one distribution
            """self.norm = nn.BatchNorm1d(32)
        self.head = nn.Linear(64, 3)""",
            """a, b = x.chunk(2)
        x = torch.cat([F.relu(self.norm(self.hidden[0](v))) for v in (a, b)])
        x = F.relu(self.hidden[2](F.relu(self.hidden[1](x))))""",
            EVAL_MODE,
        ),
    ],
)
def test_norms_of_their_own_or_shared_where_that_is_right_are_not_named(
    doctor_script: Doctor, norms: str, forward: str, evaluate: str
) -> None:
    assert _run(doctor_script, norms, forward, evaluate) == []


def test_a_norm_shared_by_sequences_one_at_a_time_or_under_no_grad_is_named(
    doctor_script: Doctor,
) -> None:
    """Statistics over a sequence's positions (a batch of one), and a place run under
    ``no_grad`` in training mode (its statistics update all the same)."""
    found = _run(
        doctor_script,
        "self.norm = nn.BatchNorm1d(32)",
        """x = F.relu(self.norm(self.hidden[0](x).T[None]))[0].T
        with torch.no_grad():
            self.norm(self.hidden[1](x).T[None] * 10 + 40)
        x = F.relu(self.hidden[1](x))""",
    )
    assert len(found) == 1, found


def test_a_quarter_of_the_channels_apart_is_apart(doctor_script: Doctor) -> None:
    """One norm for two groups of the same columns, a third of them in other units."""
    found = _run(
        doctor_script,
        "self.norm = nn.BatchNorm1d(6)",
        """a = self.norm(x)
        b = self.norm(torch.cat([x[:, :2] * 100 + 300, x[:, 2:]], 1))
        x = F.relu(self.hidden[0](a + b))""",
    )
    assert len(found) == 1, found


@pytest.mark.parametrize(
    "forward",
    [
        # ghost batch norm: one norm over chunks of 8 rows, their statistics noisy alike
        """x = torch.cat([self.norm(c) for c in self.hidden[0](x).split(8)])
        x = F.relu(self.hidden[2](F.relu(self.hidden[1](F.relu(x)))))""",
        # a recurrence from a state of zeros: the first call's input is a constant
        """h = torch.zeros(len(x), 32)
        for _ in range(4):
            h = torch.tanh(self.norm(self.hidden[1](h)) + self.hidden[0](x))""",
    ],
)
def test_calls_apart_by_noise_or_a_first_state_of_zeros_are_not_named(
    doctor_script: Doctor, forward: str
) -> None:
    script = forward + "\n        x = h" if "h = " in forward else forward
    assert _run(doctor_script, ONE_NORM, script) == []


def test_the_gap_is_each_calls_distance_from_the_blend_of_the_calls() -> None:
    """Two calls alike give 0; one shifted by 2 standard deviations gives 1 (each is 1 from
    their mean); variances 4x apart, the calls' median (the upper of two): log(2.5 / 1) / 2, the
    smaller's; a first call of a constant input is left out."""
    ones = torch.ones(8)
    alike = torch.stack([torch.stack([ones * 0, ones]), torch.stack([ones * 0, ones])])
    assert float(_gap(alike)) == pytest.approx(0, abs=1e-6)
    shifted = torch.stack([torch.stack([ones * 0, ones]), torch.stack([ones * 2, ones])])
    assert float(_gap(shifted)) == pytest.approx(1, abs=1e-4)
    scaled = torch.stack([torch.stack([ones * 0, ones]), torch.stack([ones * 0, ones * 4])])
    assert float(_gap(scaled)) == pytest.approx(0.5 * torch.tensor(2.5).log().item(), abs=1e-4)
    start = torch.stack([torch.stack([ones * 3, ones * 0]), *alike])  # zeros in, a bias out
    assert float(_gap(start)) == pytest.approx(0, abs=1e-6)
