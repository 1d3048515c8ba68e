"""``logits-bounded``: cosine similarities, a tanh or a clamp given to ``cross_entropy`` with
nothing to scale them; and the same scaled by a temperature, a learned scale that grows past
them, a tanh in a hidden layer, few classes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "logits-bounded"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
classes = CLASSES
centres = torch.randn(classes, 16)
body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
weight = nn.Parameter(torch.randn(classes, 16))
scale = nn.Parameter(torch.tensor(1.0))
opt = torch.optim.Adam([*body.parameters(), weight, scale], 1e-2)
for step in range(40):
    y = torch.randint(0, classes, (64,))
    x = centres[y] + 0.5 * torch.randn(64, 16)
    h = body(x)
    logits = LOGITS
    loss = F.cross_entropy(logits, TARGET)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def script(logits: str, classes: int = 50, target: str = "y") -> str:
    return (
        SCRIPT.replace("CLASSES", str(classes)).replace("LOGITS", logits).replace("TARGET", target)
    )


COSINE = "F.normalize(h, dim=1) @ F.normalize(weight, dim=1).t()"


@pytest.mark.parametrize(
    ("logits", "bound"),
    [
        (COSINE, "cosine similarities"),
        (f"({COSINE}) / 1.0", "cosine similarities"),  # a temperature of 1
        ("F.cosine_similarity(h[:, None], weight[None], dim=-1)", "cosine similarities"),
        ("torch.tanh(h @ weight.t())", "a tanh"),
        ("torch.clamp(h @ weight.t(), -1, 1)", "a clamp"),
        ("F.hardtanh(h @ weight.t())", "a hardtanh"),
        ("F.softsign(h @ weight.t())", "a softsign"),
        (
            "(h @ weight.t()) / (h.norm(dim=1)[:, None] * weight.norm(dim=1)[None])",
            "cosine similarities",
        ),
        ("-torch.cdist(F.normalize(h, dim=1), F.normalize(weight, dim=1))", "cosine similarities"),
        (f"torch.stack([{COSINE}, 0.5 * {COSINE}], 2).amax(2)", "cosine similarities"),
    ],
)
def test_bounded_logits_are_named(doctor: Doctor, logits: str, bound: str) -> None:
    text = script(logits)
    found = doctor(text, CODE)
    assert len(found) == 1 and found[0]["severity"] == "warning"
    evidence = found[0]["evidence"]
    assert evidence["bound"] == bound and evidence["classes"] == 50
    assert evidence["spread"] <= 2.0 + 1e-3 and evidence["floor"] > 1.5
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.strip().startswith("loss ="))
    assert found[0]["where"].endswith(f":{line}")


@pytest.mark.parametrize(
    "mask",
    [
        "logits = logits.masked_fill(torch.eye(64, dtype=torch.bool), float('-inf'))",
        "logits.fill_diagonal_(float('-inf'))",  # in place
        "logits[torch.eye(64, dtype=torch.bool)] = -1e9",
    ],
)
def test_in_batch_cosines_with_a_masked_diagonal_are_named(doctor: Doctor, mask: str) -> None:
    # NT-Xent at temperature 1: the diagonal's -inf (or -1e9) is left out of each row.
    text = script("F.normalize(h, dim=1) @ F.normalize(h, dim=1).t() / 1.0", target="y2")
    text = text.replace(
        "    loss = F", f"    {mask}\n    y2 = torch.arange(64).roll(1)\n    loss = F"
    )
    found = doctor(text, CODE)
    assert len(found) == 1 and found[0]["evidence"]["classes"] == 63


def test_a_queue_of_normalised_keys_without_a_graph_is_read_for_unit_length(doctor: Doctor) -> None:
    # MoCo at temperature 1: the positive's dot product beside a queue's, neither with a graph.
    logits = (
        "torch.cat([(F.normalize(h, dim=1) * F.normalize(centres[y], dim=1)).sum(1, keepdim=True),"
        " F.normalize(h, dim=1) @ F.normalize(centres, dim=1).t()], dim=1)"
    )
    found = doctor(script(logits, target="torch.zeros(64, dtype=torch.long)"), CODE)
    assert len(found) == 1 and found[0]["evidence"]["classes"] == 51


@pytest.mark.parametrize(
    ("logits", "classes"),
    [
        (f"({COSINE}) / 0.1", 50),  # a temperature
        (f"16 * {COSINE}", 50),  # NormFace's scale
        (f"scale.exp() * {COSINE}", 50),  # learned from exp(1): past a spread of 2.5
        ("h @ weight.t()", 50),  # plain logits
        ("torch.tanh(h) @ weight.t()", 50),  # a tanh in a hidden layer
        (COSINE, 3),  # three classes: a floor of 0.24
    ],
)
def test_scaled_or_unbounded_logits_are_not_named(
    doctor: Doctor, logits: str, classes: int
) -> None:
    assert not doctor(script(logits, classes), CODE)


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script
