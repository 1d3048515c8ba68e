"""What a model is given: raw 8-bit pixels into the first convolution, batch-first input into
a time-first recurrent layer, and dims reordered by view, judged from sampled steps' forwards."""

from __future__ import annotations

import torch
from torch import nn

from treeqa.health.findings import Finding
from treeqa.health.model_inputs import (
    RAW_PIXEL_STEPS,
    SWAPPED_STEPS,
    VIEWED_STEPS,
    ModelInputs,
    raw_pixels,
    reordering_view,
)


def test_raw_pixels_are_whole_numbers_from_zero_to_at_most_255() -> None:
    assert raw_pixels([0.0, 255.0, 0.0]) == 255.0
    assert raw_pixels([0.0, 1.0, 0.0]) is None  # a 0/1 mask
    assert raw_pixels([0.0, 1.0, 1.0]) is None  # scaled to [0, 1]
    assert raw_pixels([-2.1, 2.6, 1.0]) is None  # normalised
    assert raw_pixels([0.0, 4095.0, 0.0]) is None  # 12-bit: not 8-bit pixels


def _judged(
    steps: int,
    shape: tuple[int, ...],
    batch_size: int | None,
    layer: nn.Module,
    pixels: bool = True,
) -> list:
    """The codes ``ModelInputs`` found in ``steps`` sampled steps of ``layer`` given a tensor of
    ``shape``: 8-bit pixel values, or standardised ones (``pixels=False``: raw values into a
    recurrent layer are ``features-not-scaled``)."""
    found: list[Finding] = []
    inputs = ModelInputs(found.append)
    for _ in range(steps):
        inputs.begin_step()
        x = torch.randint(0, 256, shape).float() if pixels else torch.randn(shape)
        inputs.note("first", layer, (x,))
        inputs.judge(batch_size)
    return [f.code for f in found]


def test_raw_pixels_into_the_first_image_convolution_are_named() -> None:
    conv = nn.Conv2d(3, 4, 3)
    assert _judged(RAW_PIXEL_STEPS, (2, 3, 8, 8), None, conv) == ["pixels-not-scaled"]
    assert _judged(RAW_PIXEL_STEPS - 1, (2, 3, 8, 8), None, conv) == []
    assert _judged(RAW_PIXEL_STEPS, (2, 8, 8, 8), None, nn.Conv2d(8, 4, 3)) == []  # no image


def test_a_time_first_rnn_given_the_loaders_batch_size_first_is_named() -> None:
    lstm = nn.LSTM(5, 4)  # batch_first=False
    swapped = _judged(SWAPPED_STEPS, (32, 12, 5), 32, lstm, pixels=False)
    assert swapped == ["rnn-batch-first-mismatch"]
    assert _judged(SWAPPED_STEPS, (12, 32, 5), 32, lstm, pixels=False) == []  # [T, B, F]
    assert _judged(SWAPPED_STEPS, (32, 32, 5), 32, lstm, pixels=False) == []  # T = B
    assert _judged(SWAPPED_STEPS, (32, 12, 5), None, lstm, pixels=False) == []  # no batch size
    first = nn.LSTM(5, 4, batch_first=True)
    assert _judged(SWAPPED_STEPS, (32, 12, 5), 32, first, pixels=False) == []


def test_a_view_that_reorders_dims_is_told_from_a_transpose() -> None:
    h = torch.randn(2, 5, 4)  # [B, T, E]
    assert reordering_view(h.view(2, 4, 5)) == ([2, 5, 4], [2, 4, 5])
    assert reordering_view(h.reshape(2, 20).view(2, 4, 5)) == ([2, 5, 4], [2, 4, 5])
    assert reordering_view(h.transpose(1, 2)) is None  # moves the dims: not contiguous
    assert reordering_view(h.transpose(1, 2).contiguous()) is None  # a copy, no base
    assert reordering_view(h.view(2, 1, 20)) is None  # other sizes
    assert reordering_view(h.view(2, 5, 4, 1)) is None  # another number of dims
    assert reordering_view(torch.randn(2, 1, 5).view(2, 5, 1)) is None  # a size-1 dim moved
    assert reordering_view(torch.randn(2, 5, 5).view(2, 5, 5)) is None  # square: the same
    assert reordering_view(torch.randn(6, 5, 4)[2:4].view(2, 4, 5)) is None  # a slice's base


def test_a_view_reordering_dims_into_a_convolution_is_named_after_steps_in_a_row() -> None:
    found: list[Finding] = []
    inputs = ModelInputs(found.append)
    conv = nn.Conv1d(4, 8, 3)
    for step in range(VIEWED_STEPS + 1):
        h = torch.randn(2, 5, 4)  # [B, T, E]
        inputs.begin_step()
        # a transpose on the second step breaks the run of steps
        inputs.note("conv", conv, (h.transpose(1, 2) if step == 1 else h.view(2, 4, 5),))
        inputs.judge(None)
        assert found == []
    for _ in range(VIEWED_STEPS - 2):
        inputs.begin_step()
        inputs.note("conv", conv, (torch.randn(2, 5, 4).view(2, 4, 5),))
        inputs.judge(None)
    assert [f.code for f in found] == ["view-as-transpose"]
    assert found[0].evidence == {"base": [2, 5, 4], "shape": [2, 4, 5], "steps": VIEWED_STEPS}
    assert found[0].where == "conv (Conv1d)"


def test_raw_pixels_whose_scale_the_next_norm_removes_are_not_named() -> None:
    """Fast neural style's net reads pixels in [0, 255] through a convolution and then
    InstanceNorm2d, on purpose; a ResNet's first convolution feeds batch norm: the norm removes
    the images' scale. The first layer given the convolution's output decides; a norm in eval
    mode reads running statistics, which keep the scale."""
    conv = nn.Conv2d(3, 4, 3)

    def judged(*readers: nn.Module) -> list[str]:
        found: list[Finding] = []
        inputs = ModelInputs(found.append)
        for _ in range(RAW_PIXEL_STEPS):
            inputs.begin_step()
            x = torch.randint(0, 256, (2, 3, 8, 8)).float()
            h = conv(x)
            inputs.note("conv", conv, (x,), h)
            for reader in readers:
                inputs.note("reader", reader, (h,), (h := reader(h)))
            inputs.judge(None)
        return [f.code for f in found]

    assert judged(nn.InstanceNorm2d(4, affine=True)) == []
    assert judged(nn.GroupNorm(2, 4)) == ["pixels-not-scaled"]  # channels of other biases
    assert judged(nn.BatchNorm2d(4)) == []
    assert judged(nn.BatchNorm2d(4).eval()) == ["pixels-not-scaled"]  # frozen batch norm
    assert judged(nn.BatchNorm2d(4, track_running_stats=False).eval()) == []
    assert judged(nn.ReLU(), nn.InstanceNorm2d(4)) == ["pixels-not-scaled"]


def test_a_batch_norm_given_keras_momentum_is_named_where_it_trains() -> None:
    def codes(norm: nn.Module) -> list[str]:
        return _judged(1, (4, 3, 8, 8), None, norm)

    assert codes(nn.BatchNorm2d(3, momentum=0.99)) == ["batch-norm-momentum-inverted"]
    assert codes(nn.BatchNorm2d(3)) == []  # 0.1
    assert codes(nn.BatchNorm2d(3, momentum=None)) == []  # a cumulative average
    assert codes(nn.BatchNorm2d(3, momentum=0.99, track_running_stats=False)) == []
    assert codes(nn.BatchNorm2d(3, momentum=0.99).eval()) == []  # frozen: never updated


def test_a_batch_norm_trained_on_batches_of_one_example_is_named() -> None:
    from treeqa.health.model_inputs import LONE_STEPS

    def judged(norm: nn.Module, rows: int, steps: int = LONE_STEPS, loader: int = 0) -> list:
        found: list[Finding] = []
        inputs = ModelInputs(found.append)
        for _ in range(steps):
            inputs.begin_step()
            inputs.note("encoder.norm", norm, (torch.randn(rows, 4, 8, 8),))
            inputs.judge(loader or None)
        return [f.code for f in found]

    assert judged(nn.BatchNorm2d(4), 1) == ["batch-norm-batch-of-one"]
    assert judged(nn.BatchNorm2d(4), 1, LONE_STEPS - 1) == []
    assert judged(nn.BatchNorm2d(4), 1, loader=1) == ["batch-norm-batch-of-one"]
    # an epoch of 10 batches of 16, its last of one, on every sampled step: no batch of one
    assert judged(nn.BatchNorm2d(4), 1, loader=16) == []
    assert judged(nn.BatchNorm2d(4), 2) == []
    assert judged(nn.BatchNorm2d(4).eval(), 1) == []  # frozen while fine-tuning
    assert judged(nn.BatchNorm2d(4, track_running_stats=False), 1) == []  # the same in eval
    assert judged(nn.SyncBatchNorm(4), 1) == []  # the processes' examples together
    assert judged(nn.GroupNorm(2, 4), 1) == []
    with torch.no_grad():  # test-time adaptation, an inference at batch 1
        assert judged(nn.BatchNorm2d(4), 1) == []
