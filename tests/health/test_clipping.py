"""The doctor's view of gradient clipping on its own: clips before the step's backward, clips
given nothing, and the wrapped functions clipping exactly as torch's own."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.utils import clip_grad

from treeqa.health.clipping import BEFORE_STEPS, Clipping
from treeqa.health.findings import Finding
from treeqa.health.scalers import LossScalers
from treeqa.health.updates import Updates

needs_split_api = pytest.mark.skipif(
    not hasattr(torch.nn.utils, "get_total_norm"),
    reason=f"get_total_norm and clip_grads_with_norm_ came in torch 2.6, not {torch.__version__}",
)


def _clipping() -> tuple[Clipping, Updates, list[Finding]]:
    found: list[Finding] = []
    updates = Updates(found.append)
    clipping = Clipping(found.append, updates, LossScalers())
    clipping.install()
    return clipping, updates, found


def _step(model: nn.Module, updates: Updates, clipping: Clipping, clip_first: bool) -> None:
    """One optimiser step as the doctor sees it: a clip before or after the backward."""
    if clip_first:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    model(torch.randn(3, 4)).pow(2).sum().backward()
    updates.backwards += 1
    if not clip_first:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    clipping.end_step()
    updates.backwards = 0
    model.zero_grad()


def test_clips_before_backward_on_steps_in_a_row_are_reported() -> None:
    model = nn.Linear(4, 2)
    clipping, updates, found = _clipping()
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        clipping.reset(opt)
        for _ in range(BEFORE_STEPS - 1):
            _step(model, updates, clipping, clip_first=True)
        _step(model, updates, clipping, clip_first=False)  # one right step starts the count again
        for _ in range(BEFORE_STEPS - 1):
            _step(model, updates, clipping, clip_first=True)
        assert found == []
        _step(model, updates, clipping, clip_first=True)
        assert [f.code for f in found] == ["clip-before-backward"]
        assert found[0].where.endswith(f"{__file__}:{_step.__code__.co_firstlineno + 3}")
    finally:
        clipping.uninstall()


def test_a_clip_with_an_infinite_limit_only_reads_the_norm_and_is_not_judged() -> None:
    model = nn.Linear(4, 2)
    clipping, updates, found = _clipping()
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        clipping.reset(opt)
        for _ in range(BEFORE_STEPS + 5):
            model(torch.randn(3, 4)).pow(2).sum().backward()
            updates.backwards += 1
            clipping.end_step()  # the step; then the norm is read, to log it
            updates.backwards = 0
            torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
            model.zero_grad()
        assert found == []
    finally:
        clipping.uninstall()


def test_clips_of_parameters_the_clock_does_not_train_are_not_judged() -> None:
    model, other = nn.Linear(4, 2), nn.Linear(4, 2)
    clipping, updates, found = _clipping()
    try:
        opt = torch.optim.SGD(other.parameters(), lr=0.1)  # the clock trains another model
        clipping.reset(opt)
        for _ in range(BEFORE_STEPS + 5):
            _step(model, updates, clipping, clip_first=True)
        assert found == []
    finally:
        clipping.uninstall()


def test_a_clip_given_an_empty_generator_is_reported_once() -> None:
    model = nn.Linear(4, 2)
    params = model.parameters()
    list(params)  # used up, as by an optimiser built over it
    clipping, _, found = _clipping()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns of the empty generator too
            for _ in range(3):
                torch.nn.utils.clip_grad_norm_(params, 1.0)
        assert [f.code for f in found] == ["clip-no-parameters"]
        assert found[0].evidence == {"function": "clip_grad_norm_", "generator": True}
    finally:
        clipping.uninstall()


def _model_with_gradients() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    model(torch.randn(3, 4)).pow(2).sum().mul(100).backward()
    return model


def test_wrapped_clips_clip_as_torch_does_and_uninstall_restores_them() -> None:
    originals = (torch.nn.utils.clip_grad_norm_, clip_grad.clip_grad_value_)
    reference = _model_with_gradients()
    want = originals[0](reference.parameters(), 1.0)
    clipping, _, found = _clipping()
    try:
        assert torch.nn.utils.clip_grad_norm_ is not originals[0]
        model = _model_with_gradients()
        # A generator, by keyword: read into a list once, and clipped.
        total = torch.nn.utils.clip_grad_norm_(parameters=model.parameters(), max_norm=1.0)
        assert total.item() > 1.0 and torch.equal(total, want)
        for p, r in zip(model.parameters(), reference.parameters(), strict=True):
            assert torch.equal(p.grad, r.grad)
        clip_grad.clip_grad_value_(model.weight, 1e-3)  # one tensor is passed through as it is
        assert model.weight.grad.abs().max() <= 1e-3
        assert found == []
        second = Clipping(found.append, Updates(found.append), LossScalers())
        second.install()
        assert not second.wrappers  # wrapped once: the first monitor notes the calls
    finally:
        clipping.uninstall()
    assert (torch.nn.utils.clip_grad_norm_, clip_grad.clip_grad_value_) == originals


@needs_split_api
def test_the_split_api_clipping_by_a_norm_taken_before_the_backward_is_reported() -> None:
    """get_total_norm before the backward (of no gradients: 0), clip_grads_with_norm_ after
    it with that norm: the clip leaves the fresh gradients as they are."""
    model = nn.Linear(4, 2)
    clipping, updates, found = _clipping()
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        clipping.reset(opt)
        for i in range(BEFORE_STEPS):
            assert found == []
            total = torch.nn.utils.get_total_norm(
                [p.grad for p in model.parameters() if p.grad is not None]
            )
            model(torch.randn(3, 4)).pow(2).sum().backward()
            updates.backwards += 1
            if i == 0:  # the norm taken again after the backward: clipped as it should be
                total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            torch.nn.utils.clip_grads_with_norm_(model.parameters(), 1.0, total)
            clipping.end_step()
            updates.backwards = 0
            model.zero_grad()
        assert found == []  # 19 steps in a row
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), 1.0, torch.tensor(0.0))
        model(torch.randn(3, 4)).pow(2).sum().backward()
        updates.backwards += 1
        clipping.end_step()
        assert [f.code for f in found] == ["clip-before-backward"]
    finally:
        clipping.uninstall()


@needs_split_api
def test_wrapped_split_api_clips_as_torch_does_and_uninstall_restores_it() -> None:
    originals = (torch.nn.utils.get_total_norm, torch.nn.utils.clip_grads_with_norm_)
    reference = _model_with_gradients()
    want = originals[0]([p.grad for p in reference.parameters()])
    originals[1](reference.parameters(), 1.0, want)
    clipping, _, found = _clipping()
    try:
        assert torch.nn.utils.clip_grads_with_norm_ is not originals[1]
        assert torch.nn.utils.get_total_norm is not originals[0]
        model = _model_with_gradients()
        total = torch.nn.utils.get_total_norm(p.grad for p in model.parameters())
        assert total.item() > 1.0 and torch.equal(total, want)
        # A generator, by keyword: read into a list once, and clipped.
        torch.nn.utils.clip_grads_with_norm_(
            parameters=model.parameters(), max_norm=1.0, total_norm=total
        )
        for p, r in zip(model.parameters(), reference.parameters(), strict=True):
            assert torch.equal(p.grad, r.grad)
        assert found == []
    finally:
        clipping.uninstall()
    assert (torch.nn.utils.get_total_norm, torch.nn.utils.clip_grads_with_norm_) == originals


@needs_split_api
def test_a_norm_read_before_the_backward_only_to_log_it_leaves_later_clips_alone() -> None:
    """get_total_norm(...).item() at the loop's top (last step's norm, logged; the tensor is
    gone at once), then clip_grad_norm_ between backward and step: clean."""
    model = nn.Linear(4, 2)
    clipping, updates, found = _clipping()
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        clipping.reset(opt)
        for _ in range(BEFORE_STEPS + 5):
            torch.nn.utils.get_total_norm(
                [p.grad for p in model.parameters() if p.grad is not None]
            ).item()
            model(torch.randn(3, 4)).pow(2).sum().backward()
            updates.backwards += 1
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            clipping.end_step()
            updates.backwards = 0
        assert found == []
    finally:
        clipping.uninstall()


@needs_split_api
def test_a_clip_by_the_norm_of_the_parameters_themselves_is_reported() -> None:
    """get_total_norm takes tensors: given the parameters (the model.parameters() generator,
    or a list of them) it returns the weights' norm, and clip_grads_with_norm_ given that
    scales the gradients by it. The weights' norm only logged, beside a clip by the
    gradients' norm, is clean."""
    model = nn.Linear(4, 2)
    clipping, updates, found = _clipping()
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        clipping.reset(opt)
        for given in ("generator", "list", "logged"):
            model(torch.randn(3, 4)).pow(2).sum().backward()
            updates.backwards += 1
            grads = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            weights = torch.nn.utils.get_total_norm(
                model.parameters() if given == "generator" else list(model.parameters())
            )
            total = grads if given == "logged" else weights
            torch.nn.utils.clip_grads_with_norm_(model.parameters(), 1.0, total)
            clipping.end_step()
            updates.backwards = 0
            model.zero_grad()
            if given == "logged":
                assert found == []
            else:
                assert [f.code for f in found] == ["clip-by-weight-norm"]
                assert found[0].where.endswith(f"test_clipping.py:{_line_of('weights = ')}")
                found.clear()
                clipping.reported.clear()
    finally:
        clipping.uninstall()


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip().startswith(text))
