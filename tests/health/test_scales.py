"""``eval-inputs-off-scale``: an evaluation's inputs read against the training inputs' scale."""

from __future__ import annotations

import torch

from treeqa.health.findings import Finding
from treeqa.health.scales import TRAINED, InputScales


def _run(train: list[torch.Tensor], evaluations: list[list[torch.Tensor]]) -> list[Finding]:
    """Sampled training forwards given each of ``train`` (one before each evaluation's turn
    and the rest first), each evaluation's forwards given its tensors; judged at the end."""
    found: list[Finding] = []
    check = InputScales(found.append)
    for step, x in enumerate(train):
        check.forward((x,), {}, True, step)
    for evaluation in evaluations:
        for x in evaluation:
            check.forward((x,), {}, False, len(train))
        check.forward((train[-1],), {}, True, len(train))  # the next training forward judges
    check.judge(len(train))
    return found


def _images(n: int, seed: int) -> torch.Tensor:
    """[n, 3, 8, 8] in [0.2, 0.7]: pixels scaled to [0, 1]."""
    torch.manual_seed(seed)
    return torch.rand(n, 3, 8, 8) * 0.5 + 0.2


def _normalised(x: torch.Tensor) -> torch.Tensor:
    return (x - 0.45) / 0.144


def test_a_validation_set_left_without_normalize_is_named() -> None:
    train = [_normalised(_images(16, s)) for s in range(TRAINED)]
    found = _run(train, [[_images(16, 10 + s) for s in range(3)]])
    assert [f.code for f in found] == ["eval-inputs-off-scale"]
    evidence = found[0].evidence
    assert evidence["eval_negative"] == 0 and evidence["train_negative"] > 0.4
    assert 0.4 < evidence["eval_rms"] / evidence["train_rms"] < 0.6
    assert (evidence["train_readings"], evidence["eval_forwards"]) == (TRAINED, 3)
    assert found[0].where.endswith("test_scales.py:20")  # (the evaluation's forward)


def test_pixels_left_in_bytes_are_named_without_a_sign_apart() -> None:
    train = [_images(16, s) for s in range(TRAINED)]
    found = _run(train, [[255 * _images(16, 10 + s) for s in range(2)]])
    assert [f.code for f in found] == ["eval-inputs-off-scale"]
    assert found[0].evidence["eval_rms"] / found[0].evidence["train_rms"] > 200


def test_inputs_on_the_training_scale_are_not() -> None:
    """The same preprocessing; noise added for training only (a denoiser's clean inputs,
    under 1.5x apart); too few readings; another kind of input (another size)."""
    train = [_normalised(_images(16, s)) for s in range(TRAINED)]
    assert _run(train, [[_normalised(_images(16, 10 + s)) for s in range(3)]]) == []
    noisy = [_images(16, s) + 0.1 * torch.randn(16, 3, 8, 8) for s in range(TRAINED)]
    assert _run(noisy, [[_images(16, 10 + s) for s in range(3)]]) == []
    assert _run(train[:2], [[_images(16, 10 + s) for s in range(3)]]) == []
    assert _run(train, [[_images(16, 10)]]) == []
    other = [255 * torch.rand(16, 3, 4, 4) for _ in range(3)]
    assert _run(train, [other]) == []


def test_a_sampler_whose_inputs_change_scale_is_not_judged() -> None:
    """A diffusion model's sampler, from noise at sigma 80 down to an image: its inputs' scale
    changes by far more than the steadiness allowed."""
    train = [_images(16, s) + torch.rand(()) * torch.randn(16, 3, 8, 8) for s in range(TRAINED)]
    sampler = [_images(16, 9) + sigma * torch.randn(16, 3, 8, 8) for sigma in (80, 20, 5, 1, 0.1)]
    assert _run(train, [sampler]) == []
