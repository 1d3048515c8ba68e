"""``updates-rounded-away``: half-precision weights that the optimiser's updates leave put."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health.findings import Finding
from treeqa.health.rounding import SPAN, Rounding

EVERY = 10


def _model(dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 3)).to(dtype)


def _train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    steps: int = 120,
    after: Callable[[int], None] | None = None,
    check: Rounding | None = None,
    judge: bool = True,
) -> list[Finding]:
    """``steps`` steps on random batches, every ``EVERY``-th sampled; the findings (at the
    end, where ``judge``)."""
    found: list[Finding] = []
    check = check or Rounding(found.append)
    check.add = found.append
    names = list(model.named_parameters())
    dtype = next(model.parameters()).dtype
    for step in range(1, steps + 1):
        x, y = torch.randn(32, 16, dtype=dtype), torch.randint(0, 3, (32,))
        loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if after is not None:
            after(step)
        if step % EVERY == 1:
            check.stepped(step, opt, names)
    if judge:
        check.judge()
    return found


def test_bfloat16_weights_below_their_spacing_are_named() -> None:
    """Adam's updates of ~1e-4: the LayerNorm's weights at 1.0 (half spacing 0.0039) stay."""
    model = _model()
    (found,) = _train(model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    assert found.code == "updates-rounded-away"
    norm = found.evidence["parameters"].index("1.weight")
    assert found.evidence["judged"][norm] == 32  # none moved; those Adam moves by enough:
    assert found.evidence["stuck"][norm] >= 0.2 * 32  # (its updates over the run, at the end)
    assert "1.weight" in found.message


def test_float16_weights_are_read_too() -> None:
    model = _model(torch.float16)
    (found,) = _train(model, torch.optim.SGD(model.parameters(), lr=1e-3))
    assert "1.weight" in found.evidence["parameters"]
    assert "float16" in found.message


def test_weights_in_float32_are_not_read() -> None:
    model = _model(torch.float32)
    assert _train(model, torch.optim.AdamW(model.parameters(), lr=1e-7)) == []


def test_weights_that_move_are_not_named() -> None:
    """A learning rate above the spacing at every weight: all of them move."""
    model = _model()
    assert _train(model, torch.optim.AdamW(model.parameters(), lr=2e-2)) == []


def test_a_float32_master_copy_stepped_and_copied_in_is_not_read() -> None:
    """The optimiser holds float32 copies: its parameters are not half precision."""
    model = _model()
    master = [p.detach().float().requires_grad_() for p in model.parameters()]
    opt = torch.optim.AdamW(master, lr=1e-4)
    found: list[Finding] = []
    check = Rounding(found.append)
    for step in range(1, 121):
        loss = F.cross_entropy(
            model(torch.randn(32, 16).bfloat16()).float(), torch.zeros(32).long()
        )
        model.zero_grad()
        loss.backward()
        for p, m in zip(model.parameters(), master, strict=True):
            m.grad = p.grad.float()
        opt.step()
        with torch.no_grad():
            for p, m in zip(model.parameters(), master, strict=True):
                p.copy_(m)
        if step % EVERY == 1:
            check.stepped(step, opt, [])
    check.judge()
    assert found == []


def test_a_group_at_learning_rate_zero_and_pruned_zeros_are_not_named() -> None:
    """A group frozen by lr 0 on purpose; weights held at 0 by a mask after each step."""
    model = _model()
    first, norm, last = model[0], model[1], model[3]
    opt = torch.optim.SGD(
        [
            {"params": norm.parameters(), "lr": 0.0},
            {"params": [*first.parameters(), *last.parameters()], "lr": 0.5},
        ]
    )
    mask = torch.rand_like(first.weight) > 0.8

    def prune(step: int) -> None:
        with torch.no_grad():
            first.weight.mul_(mask)

    assert _train(model, opt, after=prune) == []


def test_a_short_run_is_not_judged() -> None:
    model = _model()
    assert _train(model, torch.optim.AdamW(model.parameters(), lr=1e-4), steps=SPAN) == []


def test_an_optimiser_of_other_parameters_has_the_last_one_judged_first() -> None:
    """Stage one's optimiser left the norms put; a second model's, at a rate that moves its
    weights, takes over: stage one's finding is made when the parameters read change."""
    model, check = _model(), Rounding(lambda f: None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    assert _train(model, opt, 120, None, check, judge=False) == []
    second = _model()
    (found,) = _train(second, torch.optim.AdamW(second.parameters(), lr=2e-2), 120, None, check)
    assert found.evidence["steps"] == [1, 111]


def test_the_same_weights_moved_by_a_later_optimiser_are_not_named() -> None:
    """A second optimiser over the same weights, at a rate that moves them: they trained."""
    model, check = _model(), Rounding(lambda f: None)
    assert (
        _train(model, torch.optim.AdamW(model.parameters(), lr=1e-4), 120, None, check, False) == []
    )
    assert _train(model, torch.optim.AdamW(model.parameters(), lr=2e-2), 120, None, check) == []


def test_weights_that_move_and_come_back_count_as_moved() -> None:
    """Read every sampled step, not only at the ends: a weight that went up and came back to
    where it was at the anchor moved."""
    p = nn.Parameter(torch.ones(64, dtype=torch.bfloat16))
    opt = torch.optim.SGD([p], lr=1.0)
    found: list[Finding] = []
    check = Rounding(found.append)
    for step in range(1, 121):
        p.grad = torch.full_like(p, 1e-4)
        opt.step()
        if step % EVERY == 1:
            check.stepped(step, opt, [("p", p)])
        with torch.no_grad():  # a big move out and back, between and at sampled steps
            p.fill_(2.0 if step % 20 == 0 else 1.0)
    check.judge()
    assert found == []


def test_a_learned_scale_of_one_number_is_judged_whole() -> None:
    """A logit scale made a bfloat16 parameter at 1.0: Adam at 1e-3 never moves it (the next
    number below is 0.0039 away)."""
    torch.manual_seed(0)
    scale = nn.Parameter(torch.tensor(1.0, dtype=torch.bfloat16))
    opt = torch.optim.Adam([scale], lr=1e-3)
    found: list[Finding] = []
    check = Rounding(found.append)
    for step in range(1, 121):
        loss = (scale.float() * torch.randn(8)).square().mean() - scale.float()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % EVERY == 1:
            check.stepped(step, opt, [("scale", scale)])
    check.judge()
    assert [f.evidence["parameters"] for f in found] == [["scale"]]


def test_weights_held_at_a_bound_against_updates_that_would_move_them_are_not_named() -> None:
    """Weights at the bound of a box projection, pushed out by every step: SGD's step there,
    1e-2, is above the half spacing at 0.5 (0.002) and lands on the same number each time,
    to be put back after it; steps of 1e-4 round away, and those weights are named."""
    signs = torch.randn(2, 64).sign()
    for lr, named in ((1e-2, []), (1e-4, [["w"]])):
        w = nn.Parameter((0.5 * signs).bfloat16())
        opt = torch.optim.SGD([w], lr=lr)
        found: list[Finding] = []
        check = Rounding(found.append)
        for step in range(1, 121):
            loss = -(w.float() * signs).sum()  # pushes every weight out of the box, by lr
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % EVERY == 1:
                check.stepped(step, opt, [("w", w)])  # (the doctor reads inside the step)
            with torch.no_grad():
                w.clamp_(-0.5, 0.5)
        check.judge()
        assert [f.evidence["parameters"] for f in found] == named


def test_weights_without_gradients_at_the_first_sampled_step_are_judged_later() -> None:
    """A LoRA pair whose B starts at 0: A has no gradient at first, and is judged from the
    sampled steps after; a channels-last convolution's weights are read in their order."""
    torch.manual_seed(0)
    a = nn.Parameter(torch.randn(8, 16, dtype=torch.bfloat16))
    b = nn.Parameter(torch.zeros(3, 8, dtype=torch.bfloat16))
    conv = nn.Conv2d(3, 8, 3).to(torch.bfloat16).to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW([a, b, *conv.parameters()], lr=1e-4)
    found: list[Finding] = []
    check = Rounding(found.append)
    for step in range(1, 301):
        x = torch.randn(16, 16, dtype=torch.bfloat16)
        y = torch.randn(16, 3, dtype=torch.bfloat16)
        image = torch.randn(2, 3, 6, 6, dtype=torch.bfloat16)
        loss = ((x @ a.t() @ b.t()).float() - y.float()).square().mean()
        loss = loss + conv(image).float().square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % EVERY == 1:
            check.stepped(step, opt, [("a", a), ("b", b), ("conv.weight", conv.weight)])
    check.judge()
    assert {"a", "conv.weight"} <= set(found[0].evidence["parameters"])


def test_a_group_added_to_the_optimiser_keeps_the_reading_going() -> None:
    """Gradual unfreezing: the head's group first, the body's added at step 40; the head's
    weights read from the first sampled step to the last (not restarted at the addition)."""
    model = _model()
    body, head = model[0], model[1:]
    body.requires_grad_(False)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4)

    def unfreeze(step: int) -> None:
        if step == 40:
            body.requires_grad_(True)
            opt.add_param_group({"params": body.parameters()})

    (found,) = _train(model, opt, after=unfreeze)
    assert found.evidence["steps"] == [1, 111] and "1.weight" in found.evidence["parameters"]


def test_a_model_cast_to_bfloat16_after_a_float32_phase_is_read() -> None:
    """Pre-training in float32, then the same parameters cast and fine-tuned by a new AdamW."""
    model, check = _model(torch.float32), Rounding(lambda f: None)
    _train(model, torch.optim.AdamW(model.parameters(), lr=1e-3), 40, None, check, judge=False)
    model.to(torch.bfloat16)
    (found,) = _train(model, torch.optim.AdamW(model.parameters(), lr=1e-4), 120, None, check)
    assert "1.weight" in found.evidence["parameters"]
