"""The checks on what an optimiser step is given (``updates.py``) and on loss inputs, on their
own: gradients carried over, steps without gradients, eval mode, a collapsed learning rate,
broadcast loss shapes, sigmoid output and logits where the loss wants something else."""

from __future__ import annotations

import math
import sys
import warnings
import weakref
from collections.abc import Callable
from types import FrameType

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health import loss_inputs, rates, slips
from treeqa.health.findings import Finding
from treeqa.health.losses import LossInputCheck
from treeqa.health.orphans import Orphans
from treeqa.health.scalers import LossScalers, scale_by_hand
from treeqa.health.updates import EMPTY_STEPS, EVAL_FORWARDS, EVAL_STEPS, Updates, _copies


def test_monte_carlo_copies_of_a_batch_are_told_from_a_batch() -> None:
    x = torch.randn(5, 3)
    assert _copies(x.repeat_interleave(4, 0)) and _copies(x.repeat(3, 1))
    assert _copies(x[:1].expand(6, 3))  # one input's copies
    assert not _copies(x) and not _copies(x[[0, 1, 0, 2, 3, 4]])  # one row seen twice


def test_gradients_not_zeroed_needs_dirty_sampled_steps_in_a_row() -> None:
    assert slips.gradients_not_zeroed([True, False, False]) is None
    assert slips.gradients_not_zeroed([False, False, True]) is None  # zeroed again
    found = slips.gradients_not_zeroed([True, False, False, False])
    assert found is not None and found.severity == "error"


def _probe_run(zero: str, steps: int = 4) -> list[bool]:
    """Step a layer whose bias is the probe, every step sampled; ``zero``: how the script
    clears gradients ("none", "set_to_none", "zeros", "accumulate" every 2 backwards;
    gradients from torch.autograd.grad set by hand: "autograd.grad" anew each step (also on
    "one batch", whose gradients barely turn from step to step), "added" to .grad and "added
    in place" (halved) with no clearing, "added, accumulate" over 2 micro-batches and cleared
    once a step)."""
    torch.manual_seed(0)
    layer = nn.Linear(4, 2)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    updates = Updates(lambda found: None)
    params = list(layer.named_parameters())
    batch = torch.randn(3, 4)
    for step in range(1, steps + 1):
        updates.begin_step(sampled=True)
        for _micro in range(2 if zero.endswith("accumulate") else 1):
            x = batch if zero.endswith("one batch") else torch.randn(3, 4)
            loss = layer(x).pow(2).mean()
            if zero == "accumulate" or not zero.startswith(("autograd", "added")):
                loss.backward()
                continue
            grads = torch.autograd.grad(loss, list(layer.parameters()))
            for p, g in zip(layer.parameters(), grads, strict=True):
                if zero == "added in place" and p.grad is not None:
                    p.grad += g / 2
                elif zero.startswith("added"):
                    p.grad = g if p.grad is None else p.grad + g
                else:
                    p.grad = g
        opt.step()
        updates.end_step(step, True, opt, [layer], params)  # as the optimiser's post-hook
        if zero in ("set_to_none", "accumulate", "added, accumulate"):
            opt.zero_grad()
        elif zero == "zeros":
            opt.zero_grad(set_to_none=False)
    probe = updates.probes.get("model")
    return probe.clean if probe is not None else []


def test_a_probe_parameter_tells_cleared_gradients_from_carried_ones() -> None:
    assert _probe_run("none") == [False, False, False]  # step 1 chooses the probe
    assert _probe_run("set_to_none") == [True, True, True]
    assert _probe_run("zeros") == [True, True, True]  # zero tensors: a host sync tells
    assert _probe_run("accumulate") == [True, True, True]  # the first micro-batch starts clean
    # .grad set by hand from torch.autograd.grad: a fresh one each step carries nothing over
    assert _probe_run("autograd.grad") == [True, True, True]
    assert _probe_run("autograd.grad, one batch") == [True, True, True]
    assert _probe_run("added") == [False, False, False]
    assert _probe_run("added in place") == [False, False, False]
    assert _probe_run("added, accumulate") == [True, True, True]


def test_a_complex_parameter_accumulating_its_gradient_is_probed_without_a_warning() -> None:
    # The dot products that tell a gradient added by hand took float() of the gradients: on a
    # complex one, torch's "Casting complex values to real discards the imaginary part" on the
    # script's output, from the doctor's line, every sampled step of gradient accumulation.
    torch.manual_seed(0)
    layer = nn.Linear(4, 2, dtype=torch.complex64)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    updates = Updates(lambda found: None)
    params = list(layer.named_parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(1, 5):
            updates.begin_step(sampled=True)
            for _micro in range(2):
                layer(torch.randn(3, 4, dtype=torch.complex64)).abs().pow(2).mean().backward()
            opt.step()
            updates.end_step(step, True, opt, [layer], params)
            opt.zero_grad()
    assert updates.probes["model"].clean == [True, True, True]  # step 1 chooses the probe


def test_a_parameter_outside_the_model_and_another_optimisers_are_probed_too() -> None:
    """The model's own gradients are cleared each step (model.zero_grad()); a temperature the
    clock's optimiser holds outside it, or a second optimiser's model, is never zeroed."""

    def run(outside_zeroed: bool, other_zeroed: bool) -> list[str]:
        torch.manual_seed(0)
        model, other = nn.Linear(4, 2), nn.Linear(4, 2)
        temperature = nn.Parameter(torch.ones(()))
        opt = torch.optim.SGD([*model.parameters(), temperature], lr=0.1)
        opt_other = torch.optim.SGD(other.parameters(), lr=0.1)
        found: list[Finding] = []
        updates = Updates(found.append)
        for step in range(1, 6):
            updates.begin_step(sampled=True)
            model.zero_grad()
            if outside_zeroed:
                temperature.grad = None
            (model(torch.randn(3, 4)) / temperature).pow(2).mean().backward()
            opt.step()
            updates.end_step(step, True, opt, [model], list(model.named_parameters()))
            if other_zeroed:
                opt_other.zero_grad()
            other(torch.randn(3, 4)).pow(2).mean().backward()
            opt_other.step()
            updates.other_step(opt_other)
        return [f.evidence["whose"] for f in found]

    assert run(True, True) == []
    assert run(False, True) == ["a parameter outside the model"]
    assert run(True, False) == ["another optimiser's parameters (SGD, 2 tensors)"]


def _micro_batch_run(how: str, steps: int = 5) -> tuple[list[bool], list[str]]:
    """Two backwards a step into a layer whose bias is the probe, every step sampled:
    "zero each" clears gradients before each, "zeros each" to zeros, "accumulate" once a step,
    "sam" between an ascent step that moves the weights in place and the real backward,
    "pcgrad" before each task's backward, then sets a combined gradient by hand; "dead ..."
    as the rest of its name, every gradient zero (a diverged or dead model's)."""
    torch.manual_seed(0)
    layer = nn.Linear(4, 2)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    found: list[Finding] = []
    updates = Updates(found.append)
    params = list(layer.named_parameters())
    dead, how = how.startswith("dead "), how.removeprefix("dead ")
    for step in range(1, steps + 1):
        updates.begin_step(sampled=True)
        if how == "accumulate":
            opt.zero_grad()
        kept = []
        for micro in range(2):
            if how in ("zero each", "sam", "pcgrad"):
                opt.zero_grad()
            elif how == "zeros each":
                opt.zero_grad(set_to_none=False)
            (layer(torch.randn(3, 4)).pow(2).mean() * (0.0 if dead else 1.0)).backward()
            kept.append([p.grad.clone() for p in layer.parameters()])
            if how == "sam" and micro == 0:
                with torch.no_grad():
                    for p in layer.parameters():
                        p.add_(0.05 * p.grad / p.grad.norm())
        if how == "pcgrad":
            for p, a, b in zip(layer.parameters(), *kept, strict=True):
                p.grad = (a + b) / 2
        opt.step()
        updates.end_step(step, True, opt, [layer], params)  # as the optimiser's post-hook
    return updates.probes["model"].discarded, [f.code for f in found]


def test_zero_grad_on_every_micro_batch_is_told_from_deliberate_second_backwards() -> None:
    # Step 1 chooses the probe; steps 2-5 are judged.
    assert _micro_batch_run("zero each") == ([True] * 4, ["zero-grad-per-micro-batch"])
    assert _micro_batch_run("zeros each") == ([True] * 4, ["zero-grad-per-micro-batch"])
    assert _micro_batch_run("accumulate") == ([False] * 4, [])
    assert _micro_batch_run("sam") == ([False] * 4, [])  # the weights moved in between
    assert _micro_batch_run("pcgrad") == ([False] * 4, [])  # the step's gradient is combined
    assert slips.zero_grad_per_micro_batch([True, True, False], 2) is None
    found = slips.zero_grad_per_micro_batch([False, True, True, True], 4)
    assert found is not None and found.evidence["backwards_per_step"] == 4


def test_a_zero_gradient_carried_over_is_not_one_cleared() -> None:
    """A diverged or dead model's gradients are zero everywhere: the second micro-batch finds
    the first's zeros, which it must not take for a cleared gradient."""
    assert _micro_batch_run("dead accumulate") == ([False] * 4, [])
    assert _micro_batch_run("dead zero each") == ([True] * 4, ["zero-grad-per-micro-batch"])
    assert _micro_batch_run("dead zeros each") == ([True] * 4, ["zero-grad-per-micro-batch"])


def _sharded_run(how: str, steps: int = 5) -> tuple[list[bool], list[bool], list[str]]:
    """A flat parameter as FSDP1's (marked ``_is_flat_param``), its gradient set by each
    backward as FSDP sets it, outside the backward's graph, every step sampled: "never zeroed"
    (FSDP1 sets a new tensor, the old one added), "zeroed" once a step, "in place, never
    zeroed" (FSDP2 adds into the tensor there), "zero each" of 2 micro-batches, "held apart"
    (the first of 2 micro-batches leaves it alone, as FSDP2's do under
    set_requires_gradient_sync(False)), "kept for the next" (FSDP1's first under no_sync
    leaves the whole flat parameter's gradient, which the second finds and reduces into a new
    tensor); "dead ..." as the rest of its name, every gradient zero."""
    torch.manual_seed(0)
    dead, how = how.startswith("dead "), how.removeprefix("dead ")
    flat = nn.Parameter(torch.zeros(6))
    flat._is_flat_param = True  # type: ignore[attr-defined]
    opt = torch.optim.SGD([flat], lr=0.1)
    found: list[Finding] = []
    updates = Updates(found.append)
    micro_batches = 1 if how in ("never zeroed", "zeroed", "in place, never zeroed") else 2
    for step in range(1, steps + 1):
        updates.begin_step(sampled=True)
        if how in ("zeroed", "held apart", "kept for the next"):
            opt.zero_grad()
        for micro in range(micro_batches):
            if how == "zero each":
                opt.zero_grad()
            updates.backward_called()
            g = torch.zeros(6) if dead else torch.randn(6)
            if how == "held apart" and micro == 0:
                pass
            elif how == "in place, never zeroed" and flat.grad is not None:
                flat.grad += g
            else:
                flat.grad = g if flat.grad is None else flat.grad + g
            updates.backward_returned()
        opt.step()
        updates.end_step(step, True, opt, [], [("flat", flat)])
    probe = updates.probes["model"]
    return probe.clean, probe.discarded, [f.code for f in found]


def test_fsdp_parameters_are_read_as_each_backward_is_called_and_returns() -> None:
    """FSDP's parameters are not the ones the backward reaches: no hook of theirs runs, and
    the gradient the optimiser steps is read around each backward instead. Step 1 chooses."""
    assert _sharded_run("never zeroed") == ([False] * 4, [], ["gradients-not-zeroed"])
    assert _sharded_run("in place, never zeroed") == ([False] * 4, [], ["gradients-not-zeroed"])
    assert _sharded_run("zeroed") == ([True] * 4, [], [])
    assert _sharded_run("zero each") == ([True] * 4, [True] * 4, ["zero-grad-per-micro-batch"])
    assert _sharded_run("held apart") == ([True] * 4, [], [])  # one backward added into it
    assert _sharded_run("kept for the next") == ([True] * 4, [False] * 4, [])
    assert _sharded_run("dead kept for the next") == ([True] * 4, [False] * 4, [])
    assert _sharded_run("dead zero each") == ([True] * 4, [True] * 4, ["zero-grad-per-micro-batch"])


def test_step_without_gradients_counts_steps_after_a_backward_only() -> None:
    found: list[Finding] = []
    updates = Updates(found.append)
    stale = nn.Linear(4, 2)  # the optimiser's parameters: no model that runs holds them
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(stale.parameters(), lr=0.1)
    for step in range(1, EMPTY_STEPS + 1):
        if step > 1:  # a step with no backward (gradients set by hand elsewhere) is not judged
            model(torch.randn(3, 4)).sum().backward()
            updates.backwards += 1
        updates.end_step(step, False, opt, [], [])
    assert found == []
    model(torch.randn(3, 4)).sum().backward()
    updates.backwards += 1
    updates.end_step(EMPTY_STEPS + 1, False, opt, [], [])
    assert [f.code for f in found] == ["step-without-gradients"]
    assert found[0].evidence["stale_parameters"] is True


def test_a_frozen_optimiser_stepping_without_gradients_is_not_judged() -> None:
    """Staged unfreezing: the backbone's optimiser steps while its parameters are frozen."""
    found: list[Finding] = []
    updates = Updates(found.append)
    backbone = nn.Linear(4, 4).requires_grad_(False)
    opt = torch.optim.SGD(backbone.parameters(), lr=0.1)
    for step in range(1, 3 * EMPTY_STEPS):
        updates.backwards += 1
        updates.end_step(step, False, opt, [backbone], [])
    assert found == []


def test_an_all_frozen_optimiser_is_judged_at_the_end_unless_another_steps() -> None:
    """An optimiser over frozen layers alone after a backward through a graph: judged at the
    run's end, so that a second optimiser first stepping late (accumulating over many
    micro-batches) clears it."""

    def run(other_steps_at: int | None) -> list[str]:
        found: list[Finding] = []
        updates = Updates(found.append)
        frozen, head = nn.Linear(4, 4).requires_grad_(False), nn.Linear(4, 2)
        opt, head_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (frozen, head))
        updates.optimizers.add(opt)
        for step in range(1, 2 * EMPTY_STEPS):
            updates.forward(frozen.train())
            head(frozen(torch.randn(3, 4))).sum().backward()
            updates.backwards += 1
            updates.end_step(step, False, opt, [frozen], [], graph=True)
            if step == other_steps_at:
                updates.optimizers.add(head_opt)
                updates.other_step(head_opt)
        updates.finish(2 * EMPTY_STEPS)
        return [f.code for f in found]

    assert run(None) == ["step-without-gradients"]
    assert run(EMPTY_STEPS + 5) == []


def test_an_optimiser_whose_models_ran_under_no_grad_is_frozen_for_now() -> None:
    """Beside the head's optimiser, which has stepped: the backbone waits under no_grad."""
    found: list[Finding] = []
    updates = Updates(found.append)
    backbone, head = nn.Linear(4, 4), nn.Linear(4, 2)
    opt, head_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (backbone, head))
    updates.optimizers.add(head_opt)  # (a weak set: held here)
    for step in range(1, 2 * EMPTY_STEPS):
        with torch.no_grad():
            features = backbone(torch.randn(3, 4))  # no forward with gradients: mode stays 0
        head(features).sum().backward()  # through the head's graph
        updates.backwards += 1
        updates.end_step(step, False, opt, [backbone], [], graph=True)
    assert found == []
    for step in range(2 * EMPTY_STEPS, 3 * EMPTY_STEPS):  # its forward has gradients, but
        updates.forward(backbone.train())  # zero_grad between backward and step: none left
        updates.backwards += 1
        updates.end_step(step, False, opt, [backbone], [], graph=True)
    assert [f.code for f in found] == ["step-without-gradients"]


def test_a_lone_optimiser_over_a_model_run_under_no_grad_is_judged_at_the_end() -> None:
    """Its models (a teacher) ran only under no_grad while the backward went through another
    model's graph (the student's) and no other optimiser stepped: every step changed nothing.
    A second optimiser first stepping late (accumulating over many micro-batches) clears it."""

    def run(other_steps_at: int | None) -> list[Finding]:
        found: list[Finding] = []
        updates = Updates(found.append)
        teacher, student = nn.Linear(4, 2), nn.Linear(4, 2)
        opt, student_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (teacher, student))
        for step in range(1, 2 * EMPTY_STEPS):
            x = torch.randn(3, 4)
            with torch.no_grad():
                updates.forward(teacher, (x,))  # (as the doctor's hook on the model tells it)
                soft = teacher(x).softmax(-1)
            (student(x) - soft).pow(2).sum().backward()
            updates.backwards += 1
            updates.end_step(step, False, opt, [teacher], [], graph=True)
            if step == other_steps_at:
                updates.optimizers.add(student_opt)
                updates.other_step(student_opt)
        updates.finish(2 * EMPTY_STEPS)
        return found

    found = run(None)
    assert [f.code for f in found] == ["step-without-gradients"]
    assert found[0].evidence["only_under_no_grad"] is True
    assert "ran only under torch.no_grad()" in found[0].message
    assert run(EMPTY_STEPS + 5) == []


def test_an_optimiser_with_empty_parameter_groups_says_it_holds_none() -> None:
    """``Adam([{"params": params}])`` given a generator already read up: torch raises on an
    empty list, not on a group with no parameters, and every step changes nothing."""
    found: list[Finding] = []
    updates = Updates(found.append)
    model = nn.Linear(4, 2)
    params = model.parameters()
    assert sum(p.numel() for p in params) == 10
    opt = torch.optim.SGD([{"params": params}], lr=0.1)
    for step in range(1, EMPTY_STEPS + 1):
        model(torch.randn(3, 4)).sum().backward()
        updates.backwards += 1
        updates.end_step(step, False, opt, [], [], graph=True)
    updates.finish(EMPTY_STEPS)
    assert [f.code for f in found] == ["step-without-gradients"]
    assert found[0].evidence["no_parameters"] is True
    assert "it holds no parameter at all" in found[0].message


def test_train_in_eval_mode_after_train_mode_with_mode_dependent_layers() -> None:
    def run(model: nn.Module, train_first: int, evaluations: tuple[int, ...] = ()) -> list[str]:
        """Train mode for ``train_first`` steps, then eval mode; an evaluation before each step
        in ``evaluations``."""
        found: list[Finding] = []
        updates = Updates(found.append)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(1, train_first + EVAL_STEPS + 5):
            updates.evaluated = step in evaluations  # as the doctor notes one between steps
            model.train(step <= train_first)
            updates.forward(model)
            updates.end_step(step, False, opt, [model], [])
        return [f.code for f in found]

    dropout = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
    assert run(dropout, 10) == ["train-in-eval-mode"]
    assert run(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), 10) == ["train-in-eval-mode"]
    assert run(dropout, 0) == []  # eval mode from the first step: on purpose
    # ...unless an evaluation before the first step put it there (a baseline score).
    assert run(dropout, 0, evaluations=(1,)) == ["train-in-eval-mode"]
    # The evaluation that put it in eval mode is where the bug is: the script never went back.
    assert run(dropout, 10, evaluations=(11,)) == ["train-in-eval-mode"]
    # It went back to train mode after an earlier evaluation: the eval phase is on purpose.
    assert run(dropout, 10, evaluations=(6, 11)) == []
    assert run(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), 10) == []  # the mode changes nothing
    assert slips.train_in_eval_mode(10, EVAL_STEPS, 11, []) is None


def test_an_eval_phase_begun_for_an_evaluation_is_judged_after_an_earlier_train() -> None:
    """A script that went back to train mode after its first evaluation, then called eval()
    once more: for a second evaluation (a bug, it never calls train()) or to train on in eval
    mode on purpose (no evaluation after that eval())."""

    def run(second_evaluates: bool) -> list[str]:
        found: list[Finding] = []
        updates = Updates(found.append)
        updates.install()
        try:
            model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            updates.watch_modes([model])
            for step in range(1, 10 + 2 * EVAL_STEPS):
                if step in (5, 10):
                    model.eval()
                    if step == 5 or second_evaluates:
                        with torch.no_grad():
                            updates.evaluation()  # as the doctor notes its forward
                    if step == 5:
                        model.train()
                updates.forward(model)
                updates.end_step(step, False, opt, [model], [])
        finally:
            updates.uninstall()
        return [f.code for f in found]

    original = nn.Module.train
    assert run(second_evaluates=True) == ["train-in-eval-mode"]
    assert run(second_evaluates=False) == []
    assert nn.Module.train is original  # wrapped for the run only


def test_an_evaluation_in_train_mode_is_a_run_of_forwards_without_gradients() -> None:
    def run(model: nn.Module, per_step: int, steps: int = 4, same: bool = False) -> list[str]:
        """``per_step`` forwards without gradients in train mode before each step's forward
        (``same``: of one input, Monte Carlo dropout's samples)."""
        found: list[Finding] = []
        updates = Updates(found.append)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(3, 4)
        for step in range(1, steps + 1):
            with torch.no_grad():
                for _ in range(per_step):
                    updates.forward(model, (x if same else torch.randn(3, 4),))
            updates.forward(model)  # the step's own, with gradients
            updates.end_step(step, False, opt, [model], [])
        return [f.code for f in found]

    bn = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    assert run(bn, EVAL_FORWARDS) == ["eval-in-train-mode"]
    assert run(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1)), 10) == ["eval-in-train-mode"]
    assert run(bn, 2) == []  # pseudo-labels for two augmentations a step (MixMatch)
    found = slips.eval_in_train_mode(5, ["1 (BatchNorm1d)"])
    assert found is not None and "dropout" not in found.message  # it says what it saw
    dropout = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
    assert run(dropout, 10, same=True) == []  # Monte Carlo dropout: samples of one input
    assert run(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), 10) == []  # the mode changes nothing
    assert run(bn.eval(), 10) == []  # an evaluation as it should be
    bn.train()[1].momentum = None  # swa_utils.update_bn recomputing the statistics
    assert run(bn, 10) == []
    frozen = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4, track_running_stats=False))
    assert run(frozen, 10) == []  # batch statistics in both modes


def test_an_evaluation_with_gradients_is_eval_mode_forwards_without_a_backward() -> None:
    def run(per_step: int, backward_each: bool = False) -> list[str]:
        """``per_step`` eval-mode forwards with gradients on before each step (with
        ``backward_each``, each followed by a backward, as in training in eval mode)."""
        found: list[Finding] = []
        updates = Updates(found.append)
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(1, 4):
            model.eval()
            for _ in range(per_step):
                updates.forward(model)
                if backward_each:
                    updates.gradients_taken()
            model.train()
            updates.forward(model)
            updates.end_step(step, False, opt, [model], [])
        return [f.code for f in found]

    assert run(EVAL_FORWARDS) == ["evaluation-with-gradients"]
    assert run(EVAL_FORWARDS - 1) == []  # the count starts again at each step
    assert run(10, backward_each=True) == []  # micro-batches, or attack steps

    # Several views a step in eval mode, one backward over them all: no evaluation.
    found: list[Finding] = []
    updates = Updates(found.append)
    model = nn.Linear(4, 2).eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 4):
        for _ in range(EVAL_FORWARDS + 2):
            updates.forward(model)
        updates.gradients_taken()
        updates.end_step(step, False, opt, [model], [])
    for _ in range(EVAL_FORWARDS):  # the script's last evaluation, after its last step
        updates.forward(model)
    assert found == []
    updates.finish(3)
    assert [f.code for f in found] == ["evaluation-with-gradients"]


def test_float16_autocast_without_a_loss_scaler_is_named() -> None:
    def run(scaled: bool, dtype: torch.dtype = torch.float16, steps: int = 4) -> list[str]:
        found: list[Finding] = []
        scalers = LossScalers()
        scalers.install()
        try:
            updates = Updates(found.append, scalers)
            model = nn.Linear(4, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = torch.amp.GradScaler("cpu")
            for step in range(1, steps + 1):
                updates.begin_step(sampled=True)
                with torch.autocast("cpu", dtype=dtype):
                    updates.forward(model)
                    loss = model(torch.randn(3, 4)).float().pow(2).mean()
                opt.zero_grad()
                (scaler.scale(loss) if scaled else loss).backward()
                opt.step()
                updates.end_step(step, True, opt, [model], list(model.named_parameters()))
        finally:
            scalers.uninstall()
        return [f.code for f in found]

    assert run(scaled=False) == ["fp16-without-loss-scaling"]
    assert run(scaled=False, steps=2) == []  # 3 sampled steps are needed
    assert run(scaled=True) == []
    assert run(scaled=False, dtype=torch.bfloat16) == []  # bfloat16 needs no scaling


def test_a_loss_scaled_by_hand_is_read_off_its_graph() -> None:
    w = torch.randn(3, requires_grad=True)
    loss = (w * w).sum()
    assert scale_by_hand(loss) == 1.0
    assert scale_by_hand(loss * 1024.0) == 1024.0
    assert scale_by_hand(1024 * loss) == 1024.0  # int factor, on either side
    assert scale_by_hand(torch.tensor(65536.0) * loss) == 65536.0  # a scaler's tensor
    assert scale_by_hand(loss.double() * 128) == 128.0  # through a cast
    assert scale_by_hand(loss * 1024 / 4) == 256.0  # then averaged over micro-batches
    assert scale_by_hand(loss, torch.tensor(512.0)) == 512.0  # backward(gradient=...)
    assert scale_by_hand(loss * 0.5) == 0.5
    assert scale_by_hand(loss * w.sum()) == 1.0  # both sides have gradients: no constant
    assert scale_by_hand(loss * torch.full((3,), 9.0)) == 1.0  # a whole tensor: weights
    assert scale_by_hand(loss.detach()) == 1.0

    scalers = LossScalers()
    scalers.note_backward(loss * 2.0, None)  # a loss weight, not a scale
    assert not scalers.scaled()
    scalers.note_backward(loss * 1024.0, None)
    assert scalers.scaled()


def test_float16_out_of_float32_weights_is_autocast_inside_the_forward() -> None:
    def marked(model: nn.Module, output: object) -> bool:
        updates = Updates(lambda found: None)
        updates.begin_step(sampled=True)
        updates.forward_done(model, output)
        return bool(updates.mode & 4)

    half = torch.zeros(2, 2, dtype=torch.float16)
    assert marked(nn.Linear(2, 2), half)
    assert marked(nn.Linear(2, 2), (half, 1.0))  # the first of a tuple
    assert marked(nn.Linear(2, 2), {"logits": half})
    assert not marked(nn.Linear(2, 2), half.float())
    assert not marked(nn.Linear(2, 2), half.bfloat16())
    assert not marked(nn.Linear(2, 2).half(), half)  # cast as a whole: no master weights


def _lr_findings(
    make, steps: int, lr: float = 0.1, every: int = 1, frozen_group: bool = False
) -> list[str]:
    """Step an optimiser ``steps`` times with the scheduler ``make(opt)`` stepped after every
    ``every``-th (a ReduceLROnPlateau is given a metric that never improves); with
    ``frozen_group``, its first parameter group is another layer at lr 0."""
    found: list[Finding] = []
    updates = Updates(found.append)
    updates.install()
    try:
        groups = [{"params": nn.Linear(2, 1).parameters()}]
        if frozen_group:
            groups.insert(0, {"params": nn.Linear(2, 1).parameters(), "lr": 0.0})
        opt = torch.optim.SGD(groups, lr=lr)
        scheduler = make(opt)
        for step in range(1, steps + 1):
            opt.step()
            updates.end_step(step, step % 50 == 0, opt, [], [])
            if step % every == 0:
                if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                    scheduler.step(1.0)
                else:
                    scheduler.step()
        updates.finish(steps)
    finally:
        updates.uninstall()
    return [f.code for f in found]


def test_lr_collapsed_is_a_per_epoch_schedule_stepped_every_batch() -> None:
    sched = torch.optim.lr_scheduler
    assert _lr_findings(lambda o: sched.StepLR(o, step_size=10, gamma=0.1), 200) == ["lr-collapsed"]
    assert _lr_findings(lambda o: sched.ExponentialLR(o, gamma=0.9), 300) == ["lr-collapsed"]
    # Schedules that reach ~0 only at their end, or come back up, are not.
    assert _lr_findings(lambda o: sched.CosineAnnealingLR(o, T_max=400), 400) == []
    assert _lr_findings(lambda o: sched.OneCycleLR(o, max_lr=0.1, total_steps=400), 400) == []
    assert _lr_findings(lambda o: sched.LinearLR(o, 1.0, 0.0, total_iters=400), 400) == []
    assert _lr_findings(lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=40), 400) == []
    assert _lr_findings(lambda o: sched.StepLR(o, step_size=100, gamma=0.1), 400) == []
    poly = lambda o: sched.PolynomialLR(o, total_iters=1000, power=4.0)  # noqa: E731
    assert _lr_findings(poly, 1000) == []  # below the floor for its last tenth
    # StepLR per batch, but the run ends soon after the collapse: a sixth of it low.
    assert _lr_findings(lambda o: sched.StepLR(o, step_size=50, gamma=0.1), 300) == []
    # A late collapse: below the floor from step 917 of 1,200 (before, as many low steps as
    # high ones were needed, and it went unreported).
    assert _lr_findings(lambda o: sched.ExponentialLR(o, gamma=0.99), 1200) == ["lr-collapsed"]
    # A group frozen at lr 0 first: the largest group's rate is judged.
    step_lr = lambda o: sched.StepLR(o, step_size=10, gamma=0.1)  # noqa: E731
    assert _lr_findings(step_lr, 200, frozen_group=True) == ["lr-collapsed"]
    assert _lr_findings(lambda o: sched.LambdaLR(o, lambda e: 1.0), 200, frozen_group=True) == []


def test_a_learning_rate_at_zero_from_the_first_step_is_named() -> None:
    sched = torch.optim.lr_scheduler
    warmup = lambda o: sched.LambdaLR(o, lambda s: min(1.0, s / 100))  # noqa: E731
    assert _lr_findings(warmup, 200) == []  # a warm-up from 0, stepped
    assert _lr_findings(warmup, 200, every=10**6) == ["lr-zero"]  # never stepped
    assert _lr_findings(lambda o: sched.LambdaLR(o, lambda s: 1.0), 200, lr=0.0) == ["lr-zero"]
    # A group frozen at 0 beside one that trains is no zero rate.
    assert _lr_findings(lambda o: sched.LambdaLR(o, lambda s: 1.0), 200, frozen_group=True) == []
    # Nor an optimiser at 0 while another one steps (a backbone's, waiting beside a head's).
    found: list[Finding] = []
    updates = Updates(found.append)
    backbone = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.0)
    head = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    updates.optimizers.add(head)
    for step in range(1, 101):
        updates.end_step(step, False, backbone, [], [])
    assert found == []


def test_a_lambda_that_returns_a_learning_rate_is_named() -> None:
    """LambdaLR multiplies the optimiser's lr by what its lambda returns: a lambda that returns
    the rate (the optimiser given it too) trains at the rate squared."""
    sched = torch.optim.lr_scheduler
    rate = lambda lr: lambda o: sched.LambdaLR(o, lambda s: lr * min(1.0, (s + 1) / 20))  # noqa: E731
    assert _lr_findings(rate(1e-3), 200, lr=1e-3) == ["lr-lambda-returns-rate"]
    assert _lr_findings(rate(1e-3), 18, lr=1e-3) == []  # judged after 20 steps
    # A factor below 0.05 meant as one: batch / 256 folded in over SGD(lr=0.1) trains at 3e-3.
    scaled = lambda o: sched.LambdaLR(o, lambda s: 8 / 256 * (1 - s / 400))  # noqa: E731
    assert _lr_findings(scaled, 300, lr=0.1) == []

    # Resumed near the end of a cosine (its last_epoch past its start): not read.
    def resumed(o: torch.optim.Optimizer) -> sched.LambdaLR:
        for group in o.param_groups:
            group["initial_lr"] = group["lr"]
        return sched.LambdaLR(o, lambda s: 0.5 * (1 + math.cos(math.pi * s / 800)), last_epoch=780)

    assert _lr_findings(resumed, 100, lr=1e-3) == []
    # A warm-up longer than the run passes the optimiser's lr on its way to 1: not judged.
    assert _lr_findings(lambda o: sched.LambdaLR(o, lambda s: s / 10_000), 200, lr=1e-2) == []
    flat = lambda o: sched.LambdaLR(o, lambda s: 3e-4)  # noqa: E731  (flat: no longer rising)
    assert _lr_findings(flat, 200, lr=1e-3) == ["lr-lambda-returns-rate"]
    # Transformer's rate() with its own lr given: found once its factor nears the lr.
    noam = lambda o: sched.LambdaLR(  # noqa: E731
        o, lambda s: 512**-0.5 * min((s + 1) ** -0.5, (s + 1) * 400**-1.5)
    )
    assert _lr_findings(noam, 600, lr=1e-3) == ["lr-lambda-returns-rate"]
    # The same with lr=1.0 (the Annotated Transformer's): the lambda is the rate, rightly.
    assert _lr_findings(noam, 600, lr=1.0) == []
    # Factors: a warm-up longer than the run (still rising), a cosine to 1e-3 of its peak.
    assert _lr_findings(lambda o: sched.LambdaLR(o, lambda s: s / 10_000), 300, lr=1e-3) == []
    cosine = lambda o: sched.LambdaLR(  # noqa: E731
        o, lambda s: max(1e-3, 0.5 * (1 + math.cos(math.pi * min(s, 300) / 300)))
    )
    assert _lr_findings(cosine, 400, lr=1e-3) == []
    # A group frozen at lr 0 beside the one the lambda schedules.
    assert _lr_findings(rate(0.01), 200, lr=0.01, frozen_group=True) == ["lr-lambda-returns-rate"]


def test_a_cosine_schedule_stepped_past_its_end_is_named() -> None:
    sched = torch.optim.lr_scheduler
    # T_max=40 meant in epochs, stepped every batch: its rate is back up by step 80.
    cosine = lambda o: sched.CosineAnnealingLR(o, T_max=40)  # noqa: E731
    assert _lr_findings(cosine, 400) == ["lr-schedule-past-end"]
    assert _lr_findings(cosine, 44) == []  # a few steps past the end: still near its floor
    found = slips.lr_schedule_past_end("CosineAnnealingLR", 40, 45)
    assert found is not None and found.evidence["scheduler_steps"] == 45
    # Restarts on purpose, and a cosine inside a warm-up, are not.
    restarts = lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=40)  # noqa: E731
    assert _lr_findings(restarts, 400) == []

    def warmed(o: torch.optim.Optimizer) -> sched.SequentialLR:
        warm = sched.LinearLR(o, 0.01, 1.0, total_iters=50)
        return sched.SequentialLR(o, [warm, sched.CosineAnnealingLR(o, T_max=350)], [50])

    assert _lr_findings(warmed, 400) == []


def test_a_one_cycle_sized_in_steps_and_stepped_once_an_epoch_is_stalled() -> None:
    """OneCycleLR(total_steps=400) stepped 10 times in 400 optimiser steps never leaves its
    warm-up; one sized in epochs and stepped per epoch runs far past 2 x total_steps; one
    stepped after each optimiser step goes through as many steps as the run takes."""
    stalled = slips.lr_schedule_stalled("OneCycleLR", 400, 10, 400, 0.005, 0.1)
    assert stalled is not None and stalled.code == "lr-schedule-stalled"
    assert stalled.evidence["scheduler_steps"] == 10 and "lr 0.005" in stalled.message
    assert slips.lr_schedule_stalled("OneCycleLR", 10, 10, 400, 0.01, 0.1) is None  # epochs
    assert slips.lr_schedule_stalled("OneCycleLR", 10, 2, 80, 0.01, 0.1) is None  # 2 epochs in
    assert slips.lr_schedule_stalled("OneCycleLR", 400, 120, 120, 0.05, 0.1) is None  # stopped
    assert slips.lr_schedule_stalled("OneCycleLR", 400, 10, 150, 0.005, 0.1) is None  # too few
    assert slips.lr_schedule_stalled("OneCycleLR", 60, 6, 40, 0.005, 0.1) is None  # < 50 steps


def test_a_plateau_scheduler_given_a_metric_against_its_mode_is_named() -> None:
    """At a ReduceLROnPlateau's first cut, values that by its mode never improved on the first
    and went the other way while the training loss fell: a loss given to mode="max" (a
    warning); a rising value given to mode="min", an accuracy or an overfitting loss (said as
    information)."""
    falling = [2.0 - i / 100 for i in range(40)]  # the training losses
    found = slips.plateau_mode_reversed("max", [5.6, 3.8, 1.7], falling)
    assert found is not None and found.severity == "warning" and "mode='max'" in found.message
    rising = slips.plateau_mode_reversed("min", [0.61, 0.74, 0.80, 0.83], falling)
    assert rising is not None and rising.severity == "info" and "overfitting" in rising.message
    assert slips.plateau_mode_reversed("max", [5.6, 3.8], falling) is None  # two values
    assert slips.plateau_mode_reversed("max", [5.6, 5.5, 5.45], falling) is None  # within 5%
    assert slips.plateau_mode_reversed("max", [5.6, 3.8, 1.7], [1.0] * 40) is None  # no fall
    assert slips.plateau_mode_reversed("max", [5.6, 5.9, 6.1, 5.5], falling) is None  # mixed
    # What the script calls it: an accuracy falling from the first is overfitting (the cut is
    # meant); an accuracy given to mode="min" is said as a warning.
    assert slips.plateau_mode_reversed("max", [0.76, 0.73, 0.67], falling, "higher") is None
    assert slips.plateau_mode_reversed("min", [0.7, 0.75, 0.82], falling, "lower") is None
    named = slips.plateau_mode_reversed("min", [0.61, 0.74, 0.80], falling, "higher")
    assert named is not None and named.severity == "warning" and "an accuracy" in named.message


class _Scheduler:
    def step(self, metric: float) -> FrameType:
        return sys._getframe(1)


def test_a_plateau_metric_is_read_as_a_loss_or_a_score_by_its_words() -> None:
    vl = 0.5
    assert rates.metric_kind(_Scheduler().step(vl)) == "lower"
    assert rates.metric_kind(_Scheduler().step(-vl)) == "higher"
    hits = (torch.arange(4) == 1).float().mean().item()  # its line says what it is
    assert rates.metric_kind(_Scheduler().step(hits)) == "higher"
    assert rates.metric_kind(_Scheduler().step(1 - hits)) == "lower"
    metric = 0.3
    assert rates.metric_kind(_Scheduler().step(metric)) == ""


def _plateau_findings(mode: str, metric: Callable[[int], float]) -> list[Finding]:
    """A run of 12 epochs of 10 steps whose training loss falls, a ReduceLROnPlateau(mode,
    patience=1) stepped after each epoch with ``metric(epoch)``."""
    found: list[Finding] = []
    updates = Updates(found.append)
    losses: list[float] = []
    updates.losses_since = lambda step: losses
    updates.install()
    try:
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode, patience=1)
        for epoch in range(12):
            for i in range(10):
                loss = model(torch.randn(8, 4)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                updates.end_step(epoch * 10 + i + 1, False, opt, [model], [])
                losses.append(2.0 / (1 + epoch * 10 + i))
            scheduler.step(metric(epoch))
    finally:
        updates.wrappers.undo()
    return [f for f in found if f.code == "plateau-mode-reversed"]


def test_a_plateau_scheduler_is_judged_at_its_first_cut() -> None:
    loss = lambda epoch: 3.0 / (1 + epoch)  # noqa: E731
    (found,) = _plateau_findings("max", loss)
    assert found.severity == "warning" and found.evidence["scheduler_steps"] == 3
    assert _plateau_findings("min", loss) == []
    accuracy = lambda epoch: min(0.9, 0.5 + 0.1 * epoch)  # noqa: E731
    assert _plateau_findings("max", accuracy) == []  # cuts once it stops rising: as meant
    (rising,) = _plateau_findings("min", accuracy)
    assert rising.severity == "info"
    # An improvement first, then a cut: the cut is the scheduler doing its work.
    assert _plateau_findings("min", lambda epoch: [1.0, 0.8][epoch] if epoch < 2 else 0.9) == []


def test_a_negative_learning_rate_is_its_own_error() -> None:
    sched = torch.optim.lr_scheduler
    decay = lambda o: sched.LambdaLR(o, lambda e: 1 - e / 10)  # noqa: E731
    assert _lr_findings(decay, 200) == ["lr-negative"]  # not also lr-collapsed
    clamped = lambda o: sched.LambdaLR(o, lambda e: max(0.0, 1 - e / 190))  # noqa: E731
    assert _lr_findings(clamped, 200) == []  # 0 for its last 10 steps: the end of a decay
    # Clamped at step 150 of 200, a quarter of the run trains at 0: that is a collapse.
    clamped_early = lambda o: sched.LambdaLR(o, lambda e: max(0.0, 1 - e / 150))  # noqa: E731
    assert _lr_findings(clamped_early, 200) == ["lr-collapsed"]


def test_lr_collapsed_leaves_a_plateau_scheduler_stepped_once_an_epoch_alone() -> None:
    sched = torch.optim.lr_scheduler

    def plateau(o: torch.optim.Optimizer) -> sched.ReduceLROnPlateau:
        return sched.ReduceLROnPlateau(o, factor=0.1, patience=0)

    # Once an epoch of 20 steps: cut at every epoch to 1e-5 x, and as long again at that rate.
    assert _lr_findings(plateau, 400, every=20) == []
    # Every batch, with a patience meant in epochs: the rate collapses within a few steps.
    assert _lr_findings(plateau, 400, every=1) == ["lr-collapsed"]
    found = slips.lr_collapsed(0.1, 10, 400, plateau_steps=400)
    assert found is not None and "patience counts batches" in found.message


@pytest.mark.skipif(
    not hasattr((torch.ones(1, requires_grad=True) * 2).grad_fn, "_input_metadata"),
    reason=f"autograd nodes give no input shapes in torch {torch.__version__}",
)
def test_a_hand_written_loss_over_a_broadcast_difference_is_found_in_its_graph() -> None:
    pred, y = torch.randn(8, 1, requires_grad=True), torch.randn(8)
    assert loss_inputs.broadcast_difference(((pred - y) ** 2).mean()) == ([8, 1], [8, 8])
    assert loss_inputs.broadcast_difference((y - pred.squeeze(1).view(-1, 1)).abs().sum() / 8) == (
        [8, 1],
        [8, 8],
    )
    # x[:, None] against samples y[None, :] is a pairwise loss on purpose (energy distance).
    x = pred.squeeze(1)
    assert loss_inputs.broadcast_difference((x[:, None] - y[None, :]).abs().mean()) is None
    # As one term of a weighted sum, after a GradScaler-like scale.
    total = 65536.0 * (0.5 * (pred - y).pow(2).mean() + 1e-3 * pred.pow(2).sum())
    assert loss_inputs.broadcast_difference(total) is not None
    assert (
        loss_inputs.broadcast_difference(((pred - y[:, None]) ** 2).mean()) is None
    )  # same shapes
    assert loss_inputs.broadcast_difference(((pred.squeeze(1) - y) ** 2).mean()) is None
    # Pairwise scores, both sides with gradients: broadcast on purpose.
    order = torch.sign(y[:, None] - y[None, :])
    assert loss_inputs.broadcast_difference((1 - (pred - pred.T) * order).relu().mean()) is None
    # A [1]-sized batch broadcasts to nothing wider.
    one = torch.randn(1, 1, requires_grad=True)
    assert loss_inputs.broadcast_difference(((one - torch.randn(1)) ** 2).mean()) is None
    # A quantile's pinball loss by hand, through torch.maximum or torch.where: it was missed.
    e = y - pred  # [8, 8]
    q = 0.9
    assert loss_inputs.broadcast_difference(torch.maximum(q * e, (q - 1) * e).mean()) is not None
    pinball = torch.where(e >= 0, q * e, (q - 1) * e).mean()
    assert loss_inputs.broadcast_difference(pinball) == ([8, 1], [8, 8])


def test_in_batch_similarities_are_a_matmul_of_two_batches() -> None:
    q = torch.randn(8, 4, requires_grad=True)
    k = torch.randn(8, 4, requires_grad=True)
    qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    assert loss_inputs.in_batch_matrix(qn @ kn.T / 0.05 - torch.randn(8)[None, :])
    assert loss_inputs.in_batch_matrix((q @ k.t()).masked_fill(torch.eye(8, dtype=torch.bool), 0))
    assert loss_inputs.in_batch_matrix(qn @ kn.detach().T)  # keys of a momentum encoder
    assert loss_inputs.in_batch_matrix(torch.einsum("bd,cd->bc", qn, kn))
    head = nn.Linear(4, 8, bias=False)  # a bias-free layer: its second factor a parameter
    assert not loss_inputs.in_batch_matrix(qn @ head.weight.T)
    assert not loss_inputs.in_batch_matrix(head(qn))
    assert not loss_inputs.in_batch_matrix(torch.einsum("bd,cd->bc", qn, head.weight))
    candidates = torch.randn(8, 8, 4, requires_grad=True)  # each row's own: positive first
    assert not loss_inputs.in_batch_matrix((candidates @ qn.unsqueeze(-1)).squeeze(-1))
    moco = torch.cat([(qn * kn).sum(1, keepdim=True), qn @ kn[1:].T], 1)  # [8, 8], positive 0
    assert not loss_inputs.in_batch_matrix(moco / 0.07)


def test_a_term_times_the_integer_zero_is_counted() -> None:
    w = torch.randn(4, requires_grad=True)
    recon, kl = (w**2).sum(), w.abs().sum()
    assert loss_inputs.zeroed_terms((recon + min(1, 5 // 100) * kl).grad_fn) == 1
    assert loss_inputs.zeroed_terms((recon + kl * 0 + 0 * w.sum()).grad_fn) == 2
    assert loss_inputs.zeroed_terms((recon + min(1.0, 0 / 100) * kl).grad_fn) == 0  # a float
    assert loss_inputs.zeroed_terms((recon + False * kl).grad_fn) == 0  # switched off
    assert loss_inputs.zeroed_terms((recon + 1 * kl).grad_fn) == 0
    per_example = w.abs()  # [4]: terms averaged after they are added
    assert loss_inputs.zeroed_terms((w**2 + 5 // 100 * per_example).mean().grad_fn) == 1


def test_a_scaled_cosine_head_is_read_off_its_product() -> None:
    """NormFace's ``s * normalize(h) @ normalize(W).T`` starts above log(C) by its scale: no
    loss-at-init. Its product's saved sides have rows (and columns) of one length; a side
    without one (class centres kept in a buffer) is read off its graph."""
    h, w = torch.randn(8, 16, requires_grad=True), nn.Parameter(torch.randn(8, 16))
    centres = torch.randn(8, 16)
    assert loss_inputs.cosine_logits(10 * F.normalize(h, dim=1) @ F.normalize(w, dim=1).T)
    assert loss_inputs.cosine_logits(F.normalize(h, dim=1) @ F.normalize(centres, dim=1).T * 30)
    assert not loss_inputs.cosine_logits(F.normalize(h, dim=1) @ w.T)
    assert not loss_inputs.cosine_logits(10 * h @ F.normalize(centres, dim=1).T)
    assert not loss_inputs.cosine_logits(nn.Linear(16, 8)(h))


def test_the_search_for_an_idle_optimiser_reads_no_deprecated_alias() -> None:
    """``not-in-optimiser`` looks through the garbage collector's objects for an optimiser
    that holds the parameters; ``isinstance`` on ``torch.distributed.reduce_op`` (a deprecated
    alias) warns, and a script run with ``-W error::FutureWarning`` stopped the monitor."""
    import torch.distributed  # noqa: F401  (its deprecated alias among the objects)

    model = nn.Linear(4, 2)
    idle = torch.optim.SGD(model.parameters(), lr=0.1)
    orphans = Orphans(lambda *a, **k: None, lambda o: set(), weakref.WeakSet(), set())
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        assert orphans._idle_holder(list(model.parameters())) is idle


def test_loss_broadcast_is_a_shape_pair_that_grows() -> None:
    found = loss_inputs.loss_broadcast("mse_loss", (32, 1), (32,))
    assert found is not None and found.evidence["broadcast_shape"] == [32, 32]
    assert loss_inputs.loss_broadcast("l1_loss", (32,), (32, 1)) is not None
    assert loss_inputs.loss_broadcast("mse_loss", (32, 1), (32, 1)) is None
    assert loss_inputs.loss_broadcast("l1_loss", (32, 7), ()) is None  # a scalar target
    assert loss_inputs.loss_broadcast("mse_loss", (32, 7), (1, 7)) is None
    assert loss_inputs.loss_broadcast("mse_loss", (3,), (4,)) is None  # torch raises on its own


def test_sigmoid_output_is_told_through_views_only() -> None:
    x = torch.randn(8, 1, requires_grad=True)
    assert loss_inputs.produced_by(torch.sigmoid(x).squeeze(1), "SigmoidBackward0")
    assert loss_inputs.produced_by(torch.sigmoid(x).view(8)[:4], "SigmoidBackward0")
    assert not loss_inputs.produced_by(torch.sigmoid(x) * 2.0, "SigmoidBackward0")
    assert not loss_inputs.produced_by(torch.tanh(x), "SigmoidBackward0")
    assert not loss_inputs.produced_by(torch.sigmoid(x.detach()), "SigmoidBackward0")  # no graph


def test_a_softmax_column_into_bce_with_logits_is_probabilities() -> None:
    """A two-class softmax head's ``probs[:, 1]`` given to BCEWithLogitsLoss was missed."""
    found: list[Finding] = []
    check = LossInputCheck(found.append, lambda: True, lambda: False)
    logits = torch.randn(16, 2, requires_grad=True)
    target = torch.randint(0, 2, (16,)).float()
    check.install()
    try:
        F.binary_cross_entropy_with_logits(logits.softmax(1)[:, 1], target)
        F.binary_cross_entropy_with_logits(logits[:, 1], target)  # logits: fine
    finally:
        check.uninstall()
    assert [(f.code, f.evidence["produced_by"]) for f in found] == [
        ("probabilities-into-cross-entropy", "softmax")
    ]


def test_the_dim_a_log_softmax_normalised_is_read_from_its_graph() -> None:
    x = torch.randn(32, 3, 5, requires_grad=True)  # [B, T, C]
    assert loss_inputs.normalised_over(F.log_softmax(x, dim=-1).reshape(-1, 5)) == (
        [32, 3, 5],
        2,
        False,
    )
    assert loss_inputs.normalised_over(torch.log(F.softmax(x[:, 0], dim=0))) == ([32, 5], 0, True)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        implicit = F.log_softmax(x)  # 3-D without dim=: torch picks dim 0, the batch
    assert loss_inputs.normalised_over(implicit.view(-1, 5)) == ([32, 3, 5], 0, False)
    assert loss_inputs.normalised_over(x.log()) is None  # a log of no softmax
    assert loss_inputs.normalised_over(F.log_softmax(x.detach(), -1)) is None  # no graph
    # Judged by the normalised dim's size against the loss's classes (its dim 1)...
    assert loss_inputs.softmax_over_wrong_dim("nll_loss", [32, 3, 5], 2, False, 5) is None
    found = loss_inputs.softmax_over_wrong_dim("nll_loss", [32, 3, 5], 0, False, 5)
    assert found is not None and found.severity == "error" and found.evidence["dim"] == 0
    # ... and, with no view between, by the dim: a batch of 10 over 10 classes.
    assert loss_inputs.softmax_over_wrong_dim("nll_loss", [10, 10], 0, True, 10) is not None
    assert loss_inputs.softmax_over_wrong_dim("nll_loss", [10, 10], 1, True, 10) is None
    # A square tensor normalised over dim 0, then transposed: its classes (a view between).
    square = torch.randn(10, 10, requires_grad=True)
    source = loss_inputs.normalised_over(F.log_softmax(square, dim=0).t())
    assert source == ([10, 10], 0, False)
    assert loss_inputs.softmax_over_wrong_dim("nll_loss", *source, 10) is None


def test_values_above_zero_are_not_log_probabilities() -> None:
    torch.manual_seed(0)
    logits = torch.randn(16, 5) * 3
    assert loss_inputs.above_zero(logits) is not None
    assert loss_inputs.above_zero(F.log_softmax(logits, 1)) is None
    assert loss_inputs.above_zero(F.log_softmax(logits.half(), 1)) is None
    assert loss_inputs.above_zero(F.log_softmax(logits * 1e4, 1)) is None  # one class at ~1


def test_the_loss_wrappers_report_and_leave_correct_inputs_alone() -> None:
    from treeqa.health.losses import LossInputCheck

    found: list[Finding] = []
    check = LossInputCheck(found.append, lambda: True, lambda: False)
    check.install()
    try:
        pred = torch.randn(8, 1, requires_grad=True)
        F.mse_loss(pred, torch.randn(8, 1))
        F.binary_cross_entropy_with_logits(pred.squeeze(1), torch.ones(8))
        F.nll_loss(F.log_softmax(torch.randn(8, 5), 1), torch.zeros(8, dtype=torch.long))
        hidden = torch.relu(torch.randn(8, 4, requires_grad=True))
        F.cross_entropy(hidden @ torch.randn(4, 5), torch.zeros(8, dtype=torch.long))
        assert found == []
        with pytest.warns(UserWarning, match="target size"):  # torch's own warning
            F.mse_loss(pred, torch.randn(8))
        F.binary_cross_entropy_with_logits(pred.sigmoid().squeeze(1), torch.ones(8))
        F.nll_loss(torch.randn(8, 5) * 3, torch.zeros(8, dtype=torch.long))
        logits = torch.randn(8, 5, 1, requires_grad=True)
        F.cross_entropy(logits.sigmoid().squeeze(2), torch.zeros(8, dtype=torch.long))
        F.cross_entropy(torch.relu(logits).view(8, 5), torch.zeros(8, dtype=torch.long))
    finally:
        check.uninstall()
    assert [f.code for f in found] == [
        "loss-broadcast",
        "probabilities-into-cross-entropy",
        "logits-into-nll-loss",
        "probabilities-into-cross-entropy",  # a sigmoid's, through a view
        "relu-into-cross-entropy",
    ]
    assert F.mse_loss.__name__ == "mse_loss"  # unwrapped


def test_functional_dropout_without_training_is_named_in_evaluations_only() -> None:
    from treeqa.health.dropouts import Dropouts

    found: list[Finding] = []
    check = Dropouts(found.append)
    x = torch.randn(4, 8)
    F.dropout(x, 0.5)  # in a training step: not wrapped, not judged
    check.begin()
    try:
        nn.Dropout(0.5).eval()(x)  # passes its training flag
        F.dropout(x, 0.5, training=False)
        F.dropout(x, p=0.5, training=True)  # Monte Carlo dropout, said so
        F.dropout(x, 0.0)
        assert found == []
        F.dropout(x, 0.5)
    finally:
        check.end()
    assert [f.code for f in found] == ["dropout-in-eval"]
    assert F.dropout.__name__ == "dropout"  # unwrapped after the evaluation


def test_dropout_imported_by_name_in_the_models_module_is_wrapped_there_too() -> None:
    import sys
    import types

    from treeqa.health.dropouts import Dropouts

    source = """
import torch
from torch import nn
from torch.nn.functional import dropout as drop
from torch.nn.functional import scaled_dot_product_attention as attend


class Net(nn.Module):
    def __init__(self, mc: bool = False):
        super().__init__()
        self.mc = mc
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        if self.mc:
            return drop(self.linear(x), 0.5, training=True)  # Monte Carlo dropout, said so
        return drop(self.linear(x), 0.5)
"""
    module = types.ModuleType("user_model_for_test")
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, "user_model_for_test.py", "exec"), vars(module))
        original = module.drop
        for mc, expected in ((True, []), (False, ["dropout-in-eval"])):
            found: list[Finding] = []
            check = Dropouts(found.append)
            model = module.Net(mc).eval()
            check.begin(model)
            try:
                with torch.no_grad():
                    model(torch.randn(2, 8))
            finally:
                check.end()
            assert [f.code for f in found] == expected
            assert module.drop is original  # the module's own name is given back
            assert module.attend is F.scaled_dot_product_attention
    finally:
        del sys.modules[module.__name__]


def test_padding_in_a_token_loss_is_the_embeddings_padding_id_not_ignored() -> None:
    from treeqa.health.losses import VOCABULARY, LossInputCheck

    found: list[Finding] = []
    check = LossInputCheck(found.append, lambda: True, lambda: False)
    embed, head = nn.Embedding(VOCABULARY, 4, padding_idx=0), nn.Linear(4, VOCABULARY)
    check.watch([embed])  # no output head over the vocabulary: pointer logits, say
    assert check.paddings == {}
    check.watch([embed, head])
    check.install()
    try:
        logits = torch.randn(6, VOCABULARY)
        padded = torch.tensor([5, 9, 0, 0, 0, 7])  # [N]: three padded positions
        F.cross_entropy(logits, padded, ignore_index=0)
        F.cross_entropy(logits, torch.tensor([5, 9, 3, 1, 2, 7]))  # no padding in this batch
        F.cross_entropy(torch.randn(6, 5), padded % 5)  # classes, not the vocabulary
        assert found == []
        nn.CrossEntropyLoss()(logits, padded)  # ignore_index -100, the default
    finally:
        check.uninstall()
    assert [f.code for f in found] == ["padding-in-loss"]
    assert found[0].evidence["share"] == 0.5
    small = nn.Embedding(VOCABULARY - 1, 4, padding_idx=0)  # a categorical feature
    check.watch([small, nn.Linear(4, VOCABULARY - 1)])
    assert check.paddings == {}


def test_an_rnns_and_attentions_dropout_and_tracked_instance_norm_depend_on_the_mode() -> None:
    """An RNN's dropout between its layers and attention's on its weights are no Dropout
    modules, and an instance norm keeping running statistics uses them in eval mode: each
    makes train and eval mode compute differently."""
    from treeqa.health.updates import _mode_dependent

    model = nn.ModuleDict(
        {
            "gru": nn.GRU(4, 8, num_layers=2, dropout=0.2),
            "single": nn.GRU(4, 8),  # one layer: no dropout between layers
            "attention": nn.MultiheadAttention(8, 2, dropout=0.1),
            "tracked": nn.InstanceNorm1d(8, track_running_stats=True),
            "plain": nn.InstanceNorm1d(8),
        }
    )
    expected = [
        "gru (GRU with dropout=0.2 between its layers)",
        "attention (MultiheadAttention with dropout=0.1 on its weights)",
        "tracked (InstanceNorm1d)",
    ]
    assert _mode_dependent([model], True) == expected
    assert _mode_dependent([model]) == []
    model.eval()
    assert _mode_dependent([model]) == expected


def test_a_cross_entropy_written_by_hand_is_read_as_one() -> None:
    """``-log_softmax(z).gather(d, y).mean()`` in its usual spellings gives its classes and
    targets; a policy gradient's log-probabilities times advantages, a sum, or a gather over
    another dim than the softmax's are no cross-entropy."""
    torch.manual_seed(0)
    logits = torch.randn(8, 5, requires_grad=True)
    y = torch.randint(0, 5, (8,))
    logp = F.log_softmax(logits, dim=-1)
    for loss in (
        -logp.gather(1, y[:, None]).mean(),
        -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1).mean(),
        (-logp.gather(1, y[:, None])).mean(),
    ):
        found = loss_inputs.cross_entropy_by_hand(loss.grad_fn)
        assert found is not None and found[0] == 5 and found[1].tolist() == y.tolist()
        assert float(loss) == pytest.approx(float(F.cross_entropy(logits, y)))
    advantages = torch.randn(8, 1)
    for loss in (
        -(logp.gather(1, y[:, None]) * advantages).mean(),
        -logp.gather(1, y[:, None]).sum(),
        -F.log_softmax(logits, dim=0).gather(1, y[:, None]).mean(),
    ):
        assert loss_inputs.cross_entropy_by_hand(loss.grad_fn) is None


def test_a_log_likelihood_added_to_a_loss_with_no_minus_is_named() -> None:
    logits = torch.randn(8, 5, requires_grad=True)
    scores = torch.randn(8, requires_grad=True)
    y = torch.randint(0, 5, (8,))
    logp = F.log_softmax(logits, dim=1)
    for loss, form in (
        (F.logsigmoid(scores).mean(), "F.logsigmoid(x)"),
        (0.5 * F.logsigmoid(scores).sum() + scores.pow(2).mean(), "F.logsigmoid(x)"),
        (logp.gather(1, y[:, None]).squeeze(1).mean(), "log_softmax(x).gather(...)"),
        (logp.gather(1, y[:, None]).mean() / 4, "log_softmax(x).gather(...)"),
    ):
        assert loss_inputs.minimised_log_likelihood(loss.grad_fn) == form
    advantages = torch.randn(8, 1)
    for loss in (
        -F.logsigmoid(scores).mean(),
        F.softplus(-scores).mean(),
        scores.pow(2).mean() - F.logsigmoid(scores).mean(),
        (logp.gather(1, y[:, None]) * advantages).mean(),  # a policy gradient's, signed by its A
        -logp.gather(1, y[:, None]).mean(),
        F.cross_entropy(logits, y),
    ):
        assert loss_inputs.minimised_log_likelihood(loss.grad_fn) is None


def test_frames_of_frameworks_that_run_the_training_step_are_not_the_scripts() -> None:
    """A finding made inside ignite's trainer or skorch's ``fit`` names the script's line that
    set it going, as inside Lightning's or the transformers ``Trainer``'s."""
    from treeqa.health import sites

    packages = "/usr/lib/python3/site-packages"
    for framework in ("ignite/engine/__init__.py", "skorch/net.py", "lightning/fabric/x.py"):
        assert not sites.users(f"{packages}/{framework}")
    assert sites.users("/home/me/project/train.py")
    assert sites.users("/home/me/ignition/train.py")  # a folder named alike is the user's


def test_log_of_a_softmax_plus_a_constant_is_normalised_over_the_classes() -> None:
    """skorch's classifier takes ``log(y_pred + eps)`` of the softmax its module ends in, into
    ``nll_loss``: a cross-entropy over the classes, as ``log(softmax)`` is."""
    logits = torch.randn(8, 4, requires_grad=True)
    probabilities = logits.softmax(-1)
    assert loss_inputs.normalised_over(torch.log(probabilities + 1e-7)) == ([8, 4], 1, True)
    assert loss_inputs.normalised_over(torch.log(probabilities)) == ([8, 4], 1, True)
    assert loss_inputs.normalised_over(torch.log(probabilities + logits)) is None


def test_a_frozen_teacher_gone_before_the_report_is_judged_by_what_was_kept_of_it() -> None:
    """A script's models are freed as it ends, before the report: a teacher noted on enough
    sampled steps in train mode is judged by its class, layers and last sample, kept on the
    way; one whose weights moved through ``.data`` (a momentum teacher) still is not."""
    from treeqa.health.teachers import STEPS, FrozenInTrainMode

    def teacher() -> nn.Module:
        return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.3), nn.Linear(8, 2)).requires_grad_(
            False
        )

    for momentum in (False, True):
        check = FrozenInTrainMode(
            lambda m: [n for n, c in m.named_modules() if isinstance(c, nn.Dropout)]
        )
        model = teacher()
        for _ in range(STEPS + 1):
            with torch.no_grad():
                check.forward(model)
                model(torch.randn(2, 4))
                if momentum:
                    for p in model.parameters():
                        p.data.mul_(0.9).add_(torch.randn_like(p), alpha=0.1)
            check.end_sampled_step(set())
        del model
        found = check.finish()
        if momentum:
            assert found is None
        else:
            assert found is not None and found.code == "frozen-in-train-mode"
            assert "Sequential" in found.message


def test_zero_gradients_from_a_loss_of_exactly_zero_are_no_gradients_zeroed_in_place() -> None:
    """A cross-entropy saturated by logits grown without bound is exactly 0, and so is every
    gradient of it: the backward gave those zeros, nothing cleared them after it (as
    ``step-without-gradients`` would say); the same zeros under a loss above 0 are found."""
    for scale, expected in ((1e6, []), (1.0, ["step-without-gradients"])):
        torch.manual_seed(0)
        layer = nn.Linear(4, 3)
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        found: list[Finding] = []
        updates = Updates(found.append)
        params = list(layer.named_parameters())
        for step in range(1, 8):
            updates.begin_step(sampled=True)
            x = torch.randn(16, 4)
            logits = layer(x) * scale
            loss = F.cross_entropy(logits, logits.argmax(1).detach())
            updates.backwards += 1
            loss.backward()
            if scale == 1.0:
                opt.zero_grad(set_to_none=False)  # zeroed in place between backward and step
            opt.step()
            updates.end_step(step, True, opt, [layer], params, True, loss)
            updates.backwards = 0
            opt.zero_grad()
        assert [f.code for f in found] == expected, [f.message for f in found]


def test_zero_gradients_the_backward_gave_under_a_loss_above_zero_are_not_zeroed_in_place() -> None:
    """REINFORCE's head at zero before its first reward: every advantage 0 and the entropy at
    its peak give a loss above 0 whose every gradient is 0, which the probe's parameter was
    brought by the backward (``step-without-gradients`` would blame a zero_grad after it)."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    nn.init.zeros_(policy[2].weight)
    nn.init.zeros_(policy[2].bias)
    opt = torch.optim.Adam(policy.parameters(), lr=0.01)
    found: list[Finding] = []
    updates = Updates(found.append)
    params = list(policy.named_parameters())
    for step in range(1, 8):
        updates.begin_step(sampled=True)
        log_p = F.log_softmax(policy(torch.randn(16, 4)), -1)
        advantages = torch.zeros(16)
        entropy = -(log_p.exp() * log_p).sum(-1).mean()
        loss = -(log_p[:, 0] * advantages).mean() - 0.01 * entropy
        updates.backwards += 1
        loss.backward()
        opt.step()
        updates.end_step(step, True, opt, [policy], params, True, loss)
        updates.backwards = 0
        opt.zero_grad()
    assert found == [], [f.message for f in found]
