"""Steps made by hand: weights changed between two backwards, with no optimiser to step."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from torch import nn

from treeqa.health import hand, run_doctor
from treeqa.health.hand import HandSteps, HandUpdates, leaves


def test_the_leaves_are_the_parameters_where_the_graph_has_any() -> None:
    model = nn.Linear(3, 2)
    x = torch.randn(4, 3, requires_grad=True)  # an input that needs gradients is no weight
    found = leaves(model(x).sum())
    assert {id(t) for t in found} == {id(model.weight), id(model.bias)}
    w = torch.randn(3, 2, requires_grad=True)  # no parameters (raw tensors): every leaf
    assert {id(t) for t in leaves((x @ w).sum())} == {id(w), id(x)}


def test_a_step_is_seen_when_the_weights_move_after_a_backward() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    frozen = model[0]
    steps = HandSteps()
    assert not steps.moved()  # no backward yet
    for i in range(3):
        loss = model(torch.randn(5, 3)).pow(2).mean()
        model.zero_grad()
        steps.backward(loss)
        loss.backward()
        for p in model[1].parameters():  # the first layer is left as it is
            p.data.add_(p.grad, alpha=-0.1)
        assert steps.moved()
        assert steps.optimizer is not None and isinstance(steps.optimizer, HandUpdates)
        held = {id(p) for p in steps.optimizer.param_groups[0]["params"]}
        assert held == {id(p) for p in model[1].parameters()}
        if i == 0:
            first = steps.optimizer
        assert steps.optimizer is first  # one optimiser while the same weights train
    assert all(id(p) not in held for p in frozen.parameters())


def test_gradients_of_the_input_alone_are_no_step(monkeypatch: pytest.MonkeyPatch) -> None:
    looked_up = []
    monkeypatch.setattr(hand, "leaves", lambda loss: looked_up.append(1) or leaves(loss))
    model = nn.Linear(3, 2)
    steps = HandSteps()
    for _ in range(40):
        x = torch.randn(4, 3, requires_grad=True)
        loss = model(x).sum()
        steps.backward(loss)
        loss.backward()
        x.data += 0.1 * x.grad.sign()
        assert not steps.moved()
    assert steps.optimizer is None
    # The graph is looked up at backwards 1, 3, 7, 15 and 31: ever more rarely.
    assert len(looked_up) == 5


def test_another_run_is_looked_up_after_two_backwards_that_moved_nothing() -> None:
    first, second = nn.Linear(3, 2), nn.Linear(3, 2)
    steps = HandSteps()
    seen = []
    for model in (first, first, second, second, second, second):
        loss = model(torch.randn(4, 3)).pow(2).sum()
        steps.backward(loss)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
        seen.append(steps.moved())
    # The second model's first two updates are missed while the first's weights are watched.
    assert seen == [True, True, False, False, True, True]
    held = {id(p) for p in steps.optimizer.param_groups[0]["params"]}
    assert held == {id(p) for p in second.parameters()}


def test_gradients_never_cleared_by_hand_are_said_in_the_terms_of_a_hand_update(
    doctor_report,
) -> None:
    _, report, _ = doctor_report("bug_hand_updates_not_zeroed.py")
    (found,) = [f for f in report["findings"] if f["code"] == "gradients-not-zeroed"]
    assert "between updates by hand" in found["message"] and "p.grad = None" in found["fix"]
    assert report["steps"] == 120


def test_a_raw_tensor_model_never_cleared_is_the_model_not_something_outside_it(
    tmp_path: Path,
) -> None:
    script = tmp_path / "raw.py"
    script.write_text(
        "import torch\n"
        "w = torch.randn(4, 2, requires_grad=True)\n"
        "for _ in range(120):\n"
        "    x = torch.randn(8, 4)\n"
        "    torch.nn.functional.cross_entropy(x @ w, x[:, :2].argmax(1)).backward()\n"
        "    w.data += -0.01 * w.grad  # never cleared\n"
    )
    _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    (found,) = [f for f in report["findings"] if f["code"] == "gradients-not-zeroed"]
    assert found["message"].startswith("the gradients were never zeroed between updates by hand")


def _rates(model: nn.Module, update, clip: float = 0.0, zero_first: bool = True) -> list:
    """The step sizes the doctor's ``HandSteps`` sees over 10 updates by hand of ``model``."""
    torch.manual_seed(0)
    steps, rates = HandSteps(), []
    for _ in range(10):
        loss = model(torch.randn(32, 8)).pow(2).mean()
        if zero_first:
            model.zero_grad()
        steps.backward(loss)
        loss.backward()
        steps.backward_done()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        with torch.no_grad():
            for p in model.parameters():
                update(p)
                if not zero_first:
                    p.grad.zero_()
        assert steps.moved()
        rates.append(steps.optimizer.param_groups[0]["lr"])
    return rates


def _model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))


def test_the_step_size_of_sgd_by_hand_is_estimated_from_how_the_weights_moved() -> None:
    def sgd(p: torch.Tensor) -> None:
        p -= 0.3 * p.grad

    # Cleared before the backward, clipped (word_language_model): the gradient in .grad is
    # the one the update used when the step is found.
    assert all(abs(r - 0.3) < 1e-3 for r in _rates(_model(), sgd, clip=0.01))
    # Cleared right after the update (the tutorial): read as the backward left it.
    assert all(abs(r - 0.3) < 1e-3 for r in _rates(_model(), sgd, zero_first=False))


def test_an_update_along_the_gradient_is_a_negative_step_size() -> None:
    def ascent(p: torch.Tensor) -> None:
        p.add_(p.grad, alpha=0.3)

    # Negative from the third in a row: SAM moves its weights uphill once, on purpose.
    rates = _rates(_model(), ascent)
    assert rates[:2] == [None, None] and all(abs(r + 0.3) < 1e-3 for r in rates[2:])
    velocity: dict[int, torch.Tensor] = {}

    def momentum_ascent(p: torch.Tensor) -> None:  # not proportional, but along it everywhere
        v = velocity.setdefault(id(p), torch.zeros_like(p)).mul_(0.5).add_(p.grad)
        p += 0.3 * v

    assert all(r is not None and r < 0 for r in _rates(_model(), momentum_ascent)[2:])


def test_updates_not_proportional_to_the_gradient_have_no_step_size() -> None:
    velocity: dict[int, torch.Tensor] = {}

    def momentum(p: torch.Tensor) -> None:
        v = velocity.setdefault(id(p), torch.zeros_like(p)).mul_(0.9).add_(p.grad)
        p -= 0.3 * v

    rates = _rates(_model(), momentum)
    assert rates[0] is not None and abs(rates[0] - 0.3) < 1e-3  # no velocity yet: plain SGD
    assert rates[1:] == [None] * 9

    def adam_like(p: torch.Tensor) -> None:
        p -= 0.01 * p.grad / (p.grad.abs() + 1e-8)

    assert _rates(_model(), adam_like) == [None] * 10


def test_an_input_ascended_by_hand_has_no_negative_step_size() -> None:
    """An image moved along its gradient to excite a frozen model: on purpose, not a slip."""
    model = _model().requires_grad_(False)
    steps = HandSteps()
    image = torch.zeros(1, 8, requires_grad=True)
    for _ in range(5):
        image.grad = None
        excitation = model(image)[0, 1]
        steps.backward(excitation)
        excitation.backward()
        steps.backward_done()
        image.data += 0.1 * image.grad
        assert steps.moved()
        assert steps.optimizer.param_groups[0]["lr"] is None


def test_the_backwards_inside_an_lbfgs_step_are_not_updates_by_hand(tmp_path: Path) -> None:
    """LBFGS's step runs its closure up to max_iter times and moves the weights in between:
    each of its steps is one step, not max_iter updates by hand in its first."""
    script = tmp_path / "lbfgs.py"
    script.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Linear(8, 1)\n"
        "opt = torch.optim.LBFGS(model.parameters(), max_iter=20)\n"
        "x, y = torch.randn(64, 8), torch.randn(64, 1)\n"
        "def closure():\n"
        "    opt.zero_grad()\n"
        "    loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "    loss.backward()\n"
        "    return loss\n"
        "for _ in range(6):\n"
        "    opt.step(closure)\n"
    )
    _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    assert report["steps"] == 6


def test_weights_whose_storage_is_freed_are_no_step_and_stop_nothing() -> None:
    """FSDP's ``fully_shard`` frees the whole weights its forward gathered (storage resized to
    0) until the backward gathers them again: their elements cannot be read before the
    backward, nor after it once it frees them again."""
    model = nn.Linear(3, 2)
    steps = HandSteps()
    loss = model(torch.randn(4, 3)).sum()
    model.weight.untyped_storage().resize_(0)  # freed after the forward
    steps.backward(loss)
    model.weight.untyped_storage().resize_(6 * 4)  # gathered again for the backward
    loss.backward()
    steps.backward_done()
    model.weight.untyped_storage().resize_(0)  # and freed after it
    with torch.no_grad():
        model.bias -= 0.1 * model.bias.grad
    assert steps.moved()  # the bias, whose storage stays, moved
    assert steps.optimizer is not None
    assert [id(p) for p in steps.optimizer.param_groups[0]["params"]] == [id(model.bias)]
