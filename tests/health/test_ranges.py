"""``targets-outside-output-range``: a regression loss whose prediction comes out of a bounded
activation, with targets that activation cannot reach."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from treeqa.health.findings import Finding
from treeqa.health.ranges import STEPS, OutputRanges


def _calls(
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    target: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor],
    calls: int = STEPS,
) -> list[Finding]:
    """``calls`` sampled calls at one line of ``loss(activation(logits), target)``."""
    found: list[Finding] = []
    check = OutputRanges(found.append)
    torch.manual_seed(0)
    for _ in range(calls):
        logits = torch.randn(target.shape, requires_grad=True)
        prediction = activation(logits)
        value = loss(prediction, target)
        fname = loss.__name__ if hasattr(loss, "__name__") else "mse_loss"
        check.note(fname, prediction, target, {})
        assert value.requires_grad
    check.finish()
    return found


def _standardised(n: int = 256) -> torch.Tensor:
    torch.manual_seed(3)
    y = torch.randn(n) * 4 + 10
    return (y - y.mean()) / y.std()


def test_standardised_targets_into_a_final_relu_are_named() -> None:
    y = _standardised()
    assert _calls(F.mse_loss, y, F.relu, STEPS - 1) == []
    found = _calls(F.mse_loss, y, F.relu)
    assert [f.code for f in found] == ["targets-outside-output-range"]
    evidence = found[0].evidence
    assert evidence["produced_by"] == "ReLU" and evidence["range"] == [0.0, float("inf")]
    assert evidence["outside"] == pytest.approx(float((y < 0).float().mean()), abs=1e-4)
    assert evidence["floor"] == pytest.approx(float(y.clamp(max=0).square().mean()), rel=1e-4)
    assert evidence["spread"] == pytest.approx(float(y.var(unbiased=False)), rel=1e-4)
    assert "no gradient" in found[0].message
    lines = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "check.note(fname, prediction" in text)
    assert found[0].where.endswith(f"test_ranges.py:{line}")


def test_ratings_into_a_sigmoid_through_views_and_the_other_way_round() -> None:
    ratings = torch.randint(1, 6, (128, 1)).float()
    found = _calls(F.l1_loss, ratings, lambda z: torch.sigmoid(z).squeeze(1).unsqueeze(1))
    assert [f.evidence["produced_by"] for f in found] == ["sigmoid"]
    assert found[0].evidence["outside"] == pytest.approx(
        float((ratings > 1).float().mean()), abs=1e-4
    )
    # mse_loss(target, prediction): the same loss
    swapped = OutputRanges((out := []).append)
    for _ in range(STEPS):
        p = torch.tanh(torch.randn(128, 1, requires_grad=True))
        swapped.note("mse_loss", ratings * 3, p, {})
    swapped.finish()
    assert [f.evidence["produced_by"] for f in out] == ["tanh"]


@pytest.mark.parametrize(
    ("activation", "made", "bounds"),
    [
        (F.relu6, "hardtanh", [0.0, 6.0]),
        (lambda z: F.hardtanh(z, -2.0, 3.0), "hardtanh", [-2.0, 3.0]),
        (lambda z: z.clamp(min=0.5), "clamp", [0.5, float("inf")]),
        (F.softplus, "softplus", [0.0, float("inf")]),
    ],
)
def test_a_clamps_range_is_read_off_its_node(
    activation: Callable[[torch.Tensor], torch.Tensor], made: str, bounds: list[float]
) -> None:
    found = _calls(F.mse_loss, torch.linspace(-20, 20, 200), activation)
    assert [(f.evidence["produced_by"], f.evidence["range"]) for f in found] == [(made, bounds)]


@pytest.mark.parametrize("fname", ["smooth_l1_loss", "huber_loss"])
def test_the_floor_is_the_loss_at_the_nearest_values_in_range(fname: str) -> None:
    y = _standardised() * 3
    found: list[Finding] = []
    check = OutputRanges(found.append)
    for _ in range(STEPS):
        p = F.relu(torch.randn(256, requires_grad=True))
        check.note(fname, p, y, {"beta": 0.5} if fname == "smooth_l1_loss" else {"delta": 0.5})
    check.finish()
    knee = {"beta": 0.5} if fname == "smooth_l1_loss" else {"delta": 0.5}
    floor = getattr(F, fname)(y.clamp(min=0), y, **knee)
    assert found[0].evidence["floor"] == pytest.approx(float(floor), rel=1e-4)


def test_targets_in_reach_are_not_named() -> None:
    """Pixels in [0, 1] (a few a rounding step past 1), counts, a sigmoid scaled to ratings,
    a few outliers, a loss masked after it is taken."""
    pixels = torch.rand(64, 16)
    pixels[0, :3] = 1.0000001
    assert _calls(F.mse_loss, pixels, torch.sigmoid, 6) == []
    assert _calls(F.mse_loss, torch.poisson(torch.full((200,), 3.0)), F.relu, 6) == []
    assert _calls(F.mse_loss, torch.rand(200) * 5, lambda z: 5 * torch.sigmoid(z), 6) == []
    outliers = torch.rand(400)
    outliers[:12] = 3.0  # 3%
    assert _calls(F.mse_loss, outliers, torch.sigmoid, 6) == []
    found: list[Finding] = []
    check = OutputRanges(found.append)
    for _ in range(6):
        p = F.relu(torch.randn(256, requires_grad=True))
        check.note("mse_loss", p, _standardised(), {"reduction": "none"})
    check.finish()
    assert found == []


def test_a_line_is_judged_by_its_last_calls() -> None:
    """Calls out of range and then in range (targets jittered early, the jitter annealed
    away), or a streak cut short, are not named; a streak to the end is."""
    out, inside = _standardised(), _standardised().abs()
    for calls, named in [
        ([out] * 5 + [inside], False),
        ([out] * (STEPS - 1) + [inside] + [out] * (STEPS - 1), False),
        ([inside] * 4 + [out] * STEPS, True),
    ]:
        found: list[Finding] = []
        check = OutputRanges(found.append)
        for y in calls:
            check.note("mse_loss", F.relu(torch.randn(256, requires_grad=True)), y, {})
        check.finish()
        assert len(found) == named
        if named:
            assert found[0].evidence["calls"] == STEPS
