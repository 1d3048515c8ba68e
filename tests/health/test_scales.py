"""``eval-inputs-off-scale``: an evaluation's inputs read against the training inputs' scale."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from treeqa.health.findings import Finding
from treeqa.health.scales import TRAINED, InputScales

MODEL = nn.Identity()


def _run(train: list[torch.Tensor], evaluations: list[list[torch.Tensor]]) -> list[Finding]:
    """Sampled training forwards given each of ``train`` (one before each evaluation's turn
    and the rest first), each evaluation's forwards given its tensors; judged at the end."""
    found: list[Finding] = []
    check = InputScales(found.append)
    for step, x in enumerate(train):
        check.forward(MODEL, (x,), {}, True, step)
    for evaluation in evaluations:
        for x in evaluation:
            check.forward(MODEL, (x,), {}, False, len(train))
        check.forward(MODEL, (train[-1],), {}, True, len(train))  # the next training forward judges
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
    lines = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "(x,), {}, False, len(train))" in text)
    assert found[0].where.endswith(f"test_scales.py:{line}")  # (the evaluation's forward)


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


def test_heavy_noise_on_images_in_0_1_is_no_normalisation() -> None:
    """Noise of sigma 1 added for training puts a third of the values below 0, 2x the clean
    images' scale, but leaves their mean where it was; over dark images (MNIST's mean is 0.13)
    the noisy ones are centred on 0 too, and the mean alone tells them apart."""
    noisy = [_images(16, s) + torch.randn(16, 3, 8, 8) for s in range(TRAINED)]
    assert _run(noisy, [[_images(16, 10 + s) for s in range(3)]]) == []
    dark = [0.3 * _images(16, s) - 0.05 for s in range(TRAINED + 3)]  # mean ~0.09
    noisy = [x + 0.5 * torch.randn(16, 3, 8, 8) for x in dark[:TRAINED]]
    assert _run(noisy, [dark[TRAINED:]]) == []


def test_images_in_minus_1_1_against_0_1_are_named() -> None:
    """Pixels uniform over [0, 1] have the root mean square of 2x - 1's: only the mean and
    the sign tell them apart."""
    torch.manual_seed(0)
    train = [2 * torch.rand(16, 3, 8, 8) - 1 for _ in range(TRAINED)]
    found = _run(train, [[torch.rand(16, 3, 8, 8) for _ in range(3)]])
    assert [f.code for f in found] == ["eval-inputs-off-scale"]


def test_each_evaluation_is_judged_on_its_own() -> None:
    """Validations done right after each epoch, then a final test left unnormalised: pooled,
    the test's forwards would stand 2x apart from the validations' and none be judged."""
    found: list[Finding] = []
    check = InputScales(found.append)
    for step in range(1, 4):
        check.forward(MODEL, (_normalised(_images(16, step)),), {}, True, step)
        for s in range(2):
            check.forward(MODEL, (_normalised(_images(16, 10 * step + s)),), {}, False, step)
    for s in range(2):
        check.forward(MODEL, (_images(16, 50 + s),), {}, False, 4)  # the final test, after step 4
    assert found == []
    check.judge(4)
    assert [f.evidence["after_step"] for f in found] == [4]


def test_each_model_is_read_on_its_own() -> None:
    """Two models trained side by side on inputs of other scales (normalised images; bytes):
    the first evaluated without its Normalize is named, read against its own training."""
    found: list[Finding] = []
    check = InputScales(found.append)
    first, second = nn.Identity(), nn.Identity()
    for step in range(TRAINED):
        check.forward(first, (_normalised(_images(16, step)),), {}, True, step)
        check.forward(second, (255 * _images(16, 20 + step),), {}, True, step)
    for s in range(3):
        check.forward(first, (_images(16, 40 + s),), {}, False, TRAINED)
        check.forward(second, (255 * _images(16, 50 + s),), {}, False, TRAINED)
    check.judge(TRAINED)
    assert [f.code for f in found] == ["eval-inputs-off-scale"]
    assert found[0].evidence["train_rms"] < 2


def test_a_test_set_scored_after_the_validation_at_the_same_step_is_cut_from_it() -> None:
    """One function scores the validation set, then the test set left in bytes, both after
    the last step: the readings jump 255x between them, and the test set is judged alone."""
    train = [_images(16, s) for s in range(TRAINED)]
    evaluation = [_images(16, 10 + s) for s in range(3)] + [
        255 * _images(16, 20 + s) for s in range(3)
    ]
    found = _run(train, [evaluation])
    assert [f.evidence["eval_forwards"] for f in found] == [3]


def test_subsets_and_later_periods_on_the_training_scale_are_not() -> None:
    """Standardised features of a later period (all above the training mean), a dark subset
    of a brightness augmentation (20x smaller than the training batches), single rows."""
    torch.manual_seed(0)
    train = [torch.randn(32, 8) for _ in range(TRAINED)]
    assert _run(train, [[torch.rand(32, 8) + 1.5 for _ in range(3)]]) == []
    bright = [_images(16, s) * torch.rand(16, 1, 1, 1) for s in range(TRAINED)]
    assert _run(bright, [[_images(16, 10 + s) * 0.02 for s in range(3)]]) == []
    assert _run(train, [[1000 * torch.randn(1, 8) for _ in range(3)]]) == []
