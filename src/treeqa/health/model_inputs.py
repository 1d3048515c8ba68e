"""What a model is given, read on sampled steps from the forward hooks the monitor already
has there: images as raw 8-bit pixel values (``pixels-not-scaled``), a batch-first
sequence given to a recurrent layer that reads time first (``rnn-batch-first-mismatch``), and
an input whose dims were reordered with ``view``/``reshape`` instead of a transpose
(``view-as-transpose``); and, of the layers that read it, a batch norm given Keras's momentum
(``batch-norm-momentum-inverted``) or batches of one example (``batch-norm-batch-of-one``),
and a dropout given TensorFlow's keep probability (``dropout-as-keep-probability``,
``dropouts.py``).

Values are reduced on the device and read once at the sampled step's end (one host read);
shapes are metadata.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health import checks
from treeqa.health.dropouts import layer_dropout
from treeqa.health.feature_scales import FeatureScales
from treeqa.health.findings import Finding
from treeqa.health.rnn_readouts import RnnReadouts

PIXEL_CHANNELS = (1, 3, 4)
"""Input channels of a convolution that reads images: grey, RGB, RGBA."""
RAW_PIXEL_STEPS = 3
"""Sampled steps in a row whose images were raw pixel values."""
SWAPPED_STEPS = 3
"""Sampled steps whose recurrent input had the loader's batch size first, not second."""
VIEWED_STEPS = 3
"""Sampled steps in a row whose convolution or recurrent input was a view reordering dims."""
LONE_STEPS = 3
"""Sampled steps in a row on which a batch norm trained on a batch of one example."""
CHANNEL_NORMS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
)
"""Norms of each channel apart: by the statistics of what they are given in training mode, by
running ones in eval mode when they keep them."""


class ModelInputs:
    """``add``: where findings go (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.reported: set[str] = set()
        self.pixels: tuple[str, torch.Tensor] | None = None  # this sampled step's first conv
        self.pixels_out: weakref.ref[torch.Tensor] | None = None  # its output, until read
        self.raw_pixels = 0  # sampled steps in a row whose images were raw pixel values
        self.rnn: tuple[str, int, int] | None = None  # (layer, dim 0, dim 1) this sampled step
        self.swapped = 0  # sampled steps with the batch size in dim 0 of a time-first layer
        self.aligned = 0  # and in dim 1, as it should be
        self.viewed: tuple[str, list[int], list[int]] | None = None  # (layer, base, view)
        self.viewed_steps = 0  # sampled steps in a row with such a view
        self.lone: str | None = None  # a batch norm given one example this sampled step
        self.lone_steps = 0  # sampled steps in a row with one
        self.features = FeatureScales(add)  # ``features-not-scaled``
        self.readouts = RnnReadouts(add)  # ``bidirectional-last-step``

    def begin_step(self) -> None:
        """A sampled step starts."""
        self.pixels, self.pixels_out, self.rnn, self.viewed = None, None, None, None
        self.lone = None

    def note(self, name: str, module: nn.Module, inputs: Any, output: Any = None) -> None:
        """``module`` (named ``name``) ran a forward on ``inputs`` in a sampled step, giving
        ``output``; layers finish their forwards in the order they ran, inner before outer."""
        if self.pixels_out is not None:
            self._note_reader(self.pixels_out, module, inputs)
        self.features.note(name, module, inputs)
        self.readouts.note(name, module, output)
        for found in (checks.batch_norm_momentum(name, module), layer_dropout(name, module)):
            if found is not None:
                self._report(found)
        if self.lone is None and one_example_norm(module, inputs):
            self.lone = f"{name} ({type(module).__name__})"
        if self.viewed is None and isinstance(module, LAYOUT_LAYERS):
            x = inputs[0] if isinstance(inputs, tuple) and inputs else None
            shapes = reordering_view(x) if isinstance(x, torch.Tensor) else None
            if shapes is not None:
                self.viewed = (f"{name} ({type(module).__name__})", *shapes)
        if self.pixels is None and isinstance(module, nn.Conv2d):
            self._note_pixels(name, module, inputs, output)
        elif self.rnn is None and isinstance(module, nn.RNNBase) and not module.batch_first:
            x = inputs[0] if isinstance(inputs, tuple) and inputs else None
            if isinstance(x, torch.Tensor) and x.dim() == 3:  # a PackedSequence has no layout
                self.rnn = (f"{name} ({type(module).__name__})", x.shape[0], x.shape[1])

    def _note_pixels(self, name: str, conv: nn.Conv2d, inputs: Any, output: Any) -> None:
        """The step's first 2-D convolution: when it reads images, keep its input's
        (min, max, any fractional value), and its output to see which layer reads it."""
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if conv.in_channels not in PIXEL_CHANNELS or not isinstance(x, torch.Tensor):
            self.pixels = ("", torch.zeros(3))  # the first convolution reads no images
            return
        if x.is_floating_point() and x.numel():
            x = x.detach()
            stats = [x.min().float(), x.max().float(), (x != x.round()).any().float()]
            self.pixels = (f"{name} ({type(conv).__name__})", torch.stack(stats))
            if isinstance(output, torch.Tensor):
                self.pixels_out = weakref.ref(output)

    def _note_reader(self, out: weakref.ref[torch.Tensor], module: nn.Module, inputs: Any) -> None:
        """A layer ran after the first image convolution: when it is the first given that
        convolution's output and normalises it by its own statistics, the images' scale reaches
        no further, whatever it was."""
        x = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if x is None or x is not out():
            return
        self.pixels_out = None
        if removes_scale(module):
            self.pixels = ("", torch.zeros(3))

    def judge(self, batch_size: int | None) -> None:
        """At the sampled step's end; ``batch_size``: the newest DataLoader's, if known."""
        self.features.judge()
        self.readouts.judge()
        if self.pixels is not None and self.pixels[0]:
            high = raw_pixels(self.pixels[1].tolist())
            self.raw_pixels = self.raw_pixels + 1 if high is not None else 0
            if high is not None and self.raw_pixels == RAW_PIXEL_STEPS:
                self._report(pixels_not_scaled(self.pixels[0], high, self.raw_pixels))
        if self.rnn is not None and batch_size:
            layer, first, second = self.rnn
            # [T, 1, F]: one sequence, its time steps batched by the loader (a stateful RNN
            # over one long series), read time first as it should be.
            self.swapped += first == batch_size != second > 1
            self.aligned += second == batch_size
            if self.swapped >= SWAPPED_STEPS and not self.aligned:
                self._report(rnn_batch_first_mismatch(layer, first, second, self.swapped))
        self.viewed_steps = self.viewed_steps + 1 if self.viewed is not None else 0
        # (a DataLoader of larger batches gives one example in an epoch's last batch alone, on
        # every sampled step where an epoch is as many steps as the sampling interval)
        lone = self.lone is not None and (batch_size is None or batch_size <= 1)
        self.lone_steps = self.lone_steps + 1 if lone else 0
        if self.lone is not None and lone and self.lone_steps == LONE_STEPS:
            self._report(batch_norm_batch_of_one(self.lone, self.lone_steps))
        if self.viewed is not None and self.viewed_steps == VIEWED_STEPS:
            self._report(view_as_transpose(*self.viewed, self.viewed_steps))

    def _report(self, found: Finding) -> None:
        if found.code not in self.reported:
            self.reported.add(found.code)
            self.add(found)


def raw_pixels(stats: Sequence[float]) -> float | None:
    """The largest input value when ``stats`` = (min, max, any fractional value) of a
    convolution's image input are raw 8-bit pixel values: whole numbers from 0 up to more
    than ``PIXEL_FLOOR`` and at most 255. None for scaled or standardised inputs, 0/1 masks
    and grids of small category ids (a grid world's object and colour codes)."""
    low, high, fractional = stats
    return high if low >= 0 and PIXEL_FLOOR < high <= 255 and not fractional else None


def removes_scale(module: nn.Module) -> bool:
    """Whether ``module``, given a convolution's output, removes the scale of the convolution's
    input: it normalises each channel apart by the statistics of the tensor it is given
    (instance norm, batch norm in training mode), which takes out the channel's bias too, so
    ``norm(conv(255 * x)) == norm(conv(x))`` up to its eps. Fast neural style's net reads
    pixels in [0, 255] through a convolution and InstanceNorm2d on purpose; a ResNet's first
    convolution feeds batch norm. Running statistics (a norm in eval mode, frozen batch norm
    while fine-tuning) keep the scale, and a group norm mixes channels whose biases differ."""
    if not isinstance(module, CHANNEL_NORMS):
        return False
    return module.training or not module.track_running_stats


LAYOUT_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.RNNBase)
"""Layers that read their input's dims as a layout (channels, time, batch): a view that
reorders those dims feeds them values from the wrong places."""


def reordering_view(x: torch.Tensor) -> tuple[list[int], list[int]] | None:
    """(base shape, shape) when ``x`` is a contiguous view of a contiguous tensor with the same
    sizes in another order, ``h.view(B, E, T)`` of a ``[B, T, E]`` h: the values keep their
    memory order, so unlike ``transpose``/``permute`` (whose views are not contiguous) it
    regroups them rather than moving the dims. Sizes of 1 are left out: moving one changes no
    value's place. None otherwise (shapes are metadata: no host sync)."""
    base = x._base
    if base is None or base.dim() != x.dim() or not x.is_contiguous():
        return None
    if not base.is_contiguous() or x.storage_offset() != base.storage_offset():
        return None
    sizes = [n for n in x.shape if n != 1]
    base_sizes = [n for n in base.shape if n != 1]
    if sizes == base_sizes or sorted(sizes) != sorted(base_sizes):
        return None
    return list(base.shape), list(x.shape)


PIXEL_FLOOR = 31
"""Whole-number inputs whose largest value is at most this are category ids, not pixels: an
8-bit image batch reaches well past it."""


def one_example_norm(module: nn.Module, inputs: Any) -> bool:
    """Whether ``module`` is a batch norm that trains (with gradients, keeping running
    statistics for evaluation) on a batch of one example. ``SyncBatchNorm`` gathers the
    processes' examples: one each is a batch of as many."""
    if (
        not isinstance(module, nn.modules.batchnorm._BatchNorm)
        or isinstance(module, nn.SyncBatchNorm)
        or not module.training
        or not module.track_running_stats
        or not torch.is_grad_enabled()
    ):
        return False
    x = inputs[0] if isinstance(inputs, tuple) and inputs else None
    return isinstance(x, torch.Tensor) and x.dim() >= 2 and x.shape[0] == 1


def batch_norm_batch_of_one(layer: str, steps: int) -> Finding:
    """The batch norm ``layer`` trained on batches of one example on ``steps`` sampled steps
    in a row."""
    return Finding(
        "batch-norm-batch-of-one",
        "warning",
        f"{layer} trains on batches of one example ({steps} sampled steps in a row): in "
        "training mode it normalises each example by its own statistics (over its positions "
        "alone, as an instance norm does), while in eval mode it normalises by running "
        "averages over many examples, which training never used, so the model evaluated in "
        "eval mode is not the one that trained (and does worse)",
        where=layer,
        evidence={"layer": layer, "steps": steps},
    )


def pixels_not_scaled(layer: str, high: float, steps: int) -> Finding:
    """The image input of ``layer`` held whole numbers up to ``high`` on ``steps`` sampled
    steps: uint8 pixels turned into floats without the division by 255."""
    return Finding(
        "pixels-not-scaled",
        "warning",
        f"the images going into {layer} are raw pixel values, whole numbers from 0 to "
        f"{high:.0f} ({steps} sampled steps): the first layer's outputs are ~100x too large "
        "for its initialisation, so training is slow or unstable and any pretrained weights "
        "see inputs unlike their own",
        where=layer,
        evidence={"max": high, "steps": steps},
    )


def rnn_batch_first_mismatch(layer: str, first: int, second: int, steps: int) -> Finding:
    """A recurrent ``layer`` built time first (``batch_first=False``) was given [B, T, F]
    input: the loader's batch size ``first`` in dim 0, ``second`` in dim 1."""
    return Finding(
        "rnn-batch-first-mismatch",
        "error",
        f"{layer} reads its input as [time, batch, features] (batch_first=False) but is "
        f"given the batch first: dim 0 is {first}, the DataLoader's batch size, and dim 1 is "
        f"{second} ({steps} sampled steps), so its recurrence runs across the examples of "
        "the batch (each example's states carry into the next one's) and each time step is "
        "taken for a separate sequence",
        where=layer,
        evidence={"dim0": first, "dim1": second, "steps": steps},
    )


def view_as_transpose(layer: str, base: list[int], shape: list[int], steps: int) -> Finding:
    """The input of ``layer`` was a ``view``/``reshape`` of a ``base``-shaped tensor into
    ``shape``, the same sizes reordered, on ``steps`` sampled steps in a row."""
    return Finding(
        "view-as-transpose",
        "error",
        f"the input of {layer} is a {base} tensor reshaped with view/reshape into {shape}, its "
        f"dims reordered ({steps} sampled steps): view keeps the values in memory order, so "
        "each row of the result mixes values of different rows of the original (time steps "
        "and features, or pixels and channels, interleaved) instead of moving the dims",
        where=layer,
        evidence={"base": base, "shape": shape, "steps": steps},
    )
