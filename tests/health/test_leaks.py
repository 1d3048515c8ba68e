"""``target-in-features``: a loss's target read against the columns of the model's input."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from treeqa.health.findings import Finding
from treeqa.health.leaks import JUDGED_ROWS, STEPS, FeatureLeaks

B = 64
N = max(STEPS, -(-JUDGED_ROWS // B))  # sampled steps of B rows that make a finding


def _run(
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    fname: str = "cross_entropy",
    alone: bool = True,
) -> list[Finding]:
    """A sampled step for each (input, target): a forward given the input, ``fname`` over
    logits of one row each (class targets: 3 classes, or 5 where the targets say so), and a
    backward of that loss (``alone``) or of it plus another term."""
    found: list[Finding] = []
    check = FeatureLeaks(found.append)
    for step, (x, y) in enumerate(batches):
        check.forward((x,), {}, step)
        if fname in ("cross_entropy", "nll_loss"):
            input = torch.zeros(len(y), 5 if y.max() > 2 else 3, requires_grad=True)
        else:
            input = torch.zeros_like(y, dtype=torch.float, requires_grad=True)
        loss = getattr(F, fname)(input, y)
        check.target(fname, input, y, loss)
        check.backward((loss if alone else loss + input.square().mean()).grad_fn)
    check.finish(step)
    return found


def _batch(seed: int, classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, 6] features and [B] class labels that depend on them loosely."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, 6, generator=g)
    y = ((x[:, 0] + torch.randn(B, generator=g)).sigmoid() * classes).long().clamp(max=classes - 1)
    return x, y


def _with(x: torch.Tensor, column: torch.Tensor, at: int) -> torch.Tensor:
    return torch.cat([x[:, :at], column[:, None], x[:, at:]], 1)


def test_a_label_column_left_among_the_features_is_named() -> None:
    batches = [_batch(s) for s in range(N)]
    leaky = [(_with(x, y.float(), 6), y) for x, y in batches]
    assert _run(leaky[:-1]) == []
    found = _run(leaky)
    assert [f.code for f in found] == ["target-in-features"]
    assert found[0].evidence["place"] == [6] and found[0].evidence["class"] is None
    # standardised with the features: the label up to a factor and an offset
    standard = [(_with(x, (y - y.float().mean()) / 0.8, 2), y) for x, y in batches]
    assert _run(standard)[0].evidence["place"] == [2]


def test_a_one_hot_label_is_read_by_its_classes() -> None:
    batches = [_batch(s, classes=5) for s in range(N)]
    one_hot = [(torch.cat([x, torch.eye(5)[y]], 1), y) for x, y in batches]
    found = _run(one_hot)
    assert found[0].evidence["class"] is not None
    assert found[0].evidence["place"] == [6 + found[0].evidence["class"]]


def test_a_window_ending_on_the_value_it_predicts_is_named() -> None:
    """A series cut into windows of 8 and the value after: the window runs one too far, its
    last value the target. Inputs [B, 9, 1], a mean squared error over [B, 1]."""
    series = torch.randn(2000).cumsum(0)
    batches = []
    for s in range(N):
        starts = torch.randint(0, 1900, (B,), generator=torch.Generator().manual_seed(s))
        windows = torch.stack([series[i : i + 9] for i in starts.tolist()])  # BUG: 8
        batches.append((windows[:, :, None], series[starts + 8][:, None]))
    found = _run(batches, "mse_loss")
    assert found[0].evidence["place"] == [8, 0]


def test_near_copies_rare_matches_and_in_batch_targets_are_not_named() -> None:
    """A proxy of the label (r = 0.99); a sine sampled 0.01 rad a step, each value nearly
    the last; a rare word in the batch's two positive rows; a column matching on one step
    only; contrastive targets arange(B) over logits [B, B]."""
    batches = [_batch(s) for s in range(3 * N)]
    proxy = [(_with(x, y + 0.05 * torch.randn(B), 3), y.float()) for x, y in batches]
    assert _run(proxy, "mse_loss") == []
    t = torch.rand(B, 1) * 2 * math.pi
    sine = [(torch.sin(t + 0.01 * torch.arange(8)), torch.sin(t + 0.08)) for _ in range(N)]
    assert _run(sine, "mse_loss") == []
    rare = []
    for x, _ in batches:
        y = torch.zeros(B)
        y[:2] = 1
        rare.append((_with(x, y, 0), y))
    assert _run(rare, "binary_cross_entropy_with_logits") == []
    once = [(_with(x, y.float(), s % 6), y) for s, (x, y) in enumerate(batches)]
    assert _run(once) == []
    found: list[Finding] = []
    check = FeatureLeaks(found.append)
    ids = torch.arange(B)
    for step in range(3 * N):
        check.forward((torch.stack([ids, ids], 1).float(),), {}, step)
        similarities = torch.randn(B, B, requires_grad=True)  # [B, B]
        loss = F.cross_entropy(similarities, ids)
        check.target("cross_entropy", similarities, ids, loss)
        check.backward(loss.grad_fn)
    check.finish(step)
    assert found == []


def test_targets_of_another_shape_and_losses_summed_with_others_are_not_read() -> None:
    """An autoencoder's target is its whole input; a label column found by a loss summed
    with another term (an auxiliary task that reconstructs one input feature) is not the
    step's loss."""
    x = torch.randn(B, 6)
    found: list[Finding] = []
    check = FeatureLeaks(found.append)
    for step in range(3 * N):
        check.forward((x,), {}, step)
        output = x.clone().requires_grad_()
        loss = F.mse_loss(output, x)
        check.target("mse_loss", output, x, loss)
        check.backward(loss.grad_fn)
    check.finish(step)
    assert found == []
    batches = [_batch(s) for s in range(3 * N)]
    leaky = [(_with(x, y.float(), 6), y) for x, y in batches]
    assert _run(leaky, alone=False) == []
    assert len(_run(leaky, "mse_loss")) == 1  # (the float labels, regressed)


def test_a_feature_that_agrees_with_the_label_on_most_batches_is_not_named() -> None:
    """A test's verdict that matches the label on whole batches often, not always: one
    batch where a row disagrees keeps it from ever being named."""
    batches = [_batch(s) for s in range(4 * N)]
    agreeing = []
    for s, (x, y) in enumerate(batches):
        verdict = y.float().clone()
        if s == 2:
            verdict[0] = (verdict[0] + 1) % 3  # one row of one batch
        agreeing.append((_with(x, verdict, 1), y))
    assert _run(agreeing) == []
    assert len(_run(agreeing[3:])) == 1  # (from the fourth batch on, it agrees every time)


def test_labels_given_on_purpose_are_not_read() -> None:
    """ArcFace's forward is given the one-hot label for its margin (every column of that
    input is the label); a model given labels [B, 2] computes its loss on one of them."""
    found: list[Finding] = []
    check = FeatureLeaks(found.append)
    for step in range(3 * N):
        x, y = _batch(step, classes=5)
        labels = torch.stack([y, y % 2], 1)  # [B, 2]
        check.forward((x, torch.eye(40)[y], labels), {}, step)  # (35 classes not in the batch)
        logits = torch.zeros(B, 40, requires_grad=True)
        loss = F.cross_entropy(logits, labels[:, 0])
        check.target("cross_entropy", logits, labels[:, 0], loss)
        check.backward(loss.grad_fn)
    check.finish(step)
    assert found == []


def test_as_many_classes_as_rows_is_no_in_batch_target() -> None:
    """100 categories in batches of 100: logits [B, B], but the targets are labels, not
    arange(B); the label-encoded column is read by its value."""
    found: list[Finding] = []
    check = FeatureLeaks(found.append)
    for step in range(N):
        y = torch.randint(0, 100, (100,))
        check.forward((torch.cat([torch.randn(100, 5), y[:, None] / 99], 1),), {}, step)
        logits = torch.zeros(100, 100, requires_grad=True)
        loss = F.cross_entropy(logits, y)
        check.target("cross_entropy", logits, y, loss)
        check.backward(loss.grad_fn)
    check.finish(step)
    assert [f.evidence["place"] for f in found] == [[5]]


def test_one_batch_read_again_counts_once_and_a_view_of_the_input_is_read() -> None:
    """Full-batch training gives one batch each step: its rows are counted once. A target
    sliced from the very batch given as the input (``x = batch[:, :]``, ``y = batch[:, -1]``)
    is read."""
    x, y = _batch(0)
    assert _run([(_with(x, y.float(), 6), y)] * (3 * N)) == []
    batches = []
    for s in range(N):
        x, y = _batch(s)
        table = _with(x, y.float(), 6)  # [B, 7], the label last
        batches.append((table, table[:, -1]))
    assert len(_run(batches, "mse_loss")) == 1


def test_a_column_judged_only_early_in_the_run_is_not_named() -> None:
    """An AC-GAN's generator, given the one-hot class beside its noise, is trained on its
    auxiliary cross-entropy alone for a warm-up, then on a sum with its adversarial loss:
    judged no more after the warm-up."""
    found: list[Finding] = []
    check = FeatureLeaks(found.append)
    for step in range(4 * N):
        x, y = _batch(step)
        check.forward((_with(x, y.float(), 6),), {}, step)
        logits = torch.zeros(B, 3, requires_grad=True)
        loss = F.cross_entropy(logits, y)
        check.target("cross_entropy", logits, y, loss)
        check.backward((loss if step < 2 * N else loss + logits.square().mean()).grad_fn)
    check.finish(step)
    assert found == []


def test_a_target_copied_into_half_precision_features_is_named() -> None:
    """Prices copied into float16 or bfloat16 features are rounded to their grid: the line
    leaves 2e-4 or 1.6e-3 of the spread, within half the format's epsilon."""
    for dtype in (torch.float16, torch.bfloat16):
        batches = []
        for s in range(N):
            x, _ = _batch(s)
            price = 3 + torch.rand(B)  # [B]
            batches.append((_with(x, price, 2).to(dtype), price))
        assert len(_run(batches, "mse_loss")) == 1, dtype
