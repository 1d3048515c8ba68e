"""A model whose output is the same for every example (``outputs-constant``).

"My network predicts the same value for every input": a learning rate far too high has pushed
every unit of a ReLU layer where no input turns it on (dead: all zeros, for every row, and no
gradient to bring them back), sigmoids or tanh saturated by unscaled inputs, two layers in a row
initialised to zero, a self-supervised pair trained without a stop-gradient collapsing to one
point, a generator collapsed to one sample. The loss then falls no lower than the best
constant's, which is easy to mistake for a hard task.

On sampled steps, a trained model's output (its first floating tensor trained through whose
dim 0 is the batch, not one row broadcast: ``_read``) is compared across rows (of dims 0 and 1
for a 3-dim output, batch and time in either order): each column within ``TOLERANCE`` of the
first row's, relative to the column's largest value (all zeros count), while the rows of its
inputs differ. ``STEPS`` sampled steps in a row, over ``SPAN`` steps or more (a last layer
initialised to zero is constant until the first steps move it), make the finding; a step whose
every gradient is exactly zero (nothing trains the model yet) is not judged. Once a step has been so, the next sampled steps read
every layer's rows too, and the finding names the first layer whose output is the same for
every row: a ReLU whose input differs and whose output is all zeros has died; a layer given
the same input for every row lost it to a function between layers (``F.relu``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health import checks
from treeqa.health.findings import Finding

TOLERANCE = 5e-7
"""Rows differ by at most this share of the output's largest magnitude to count as the same:
4 float32 roundings. A dead layer's rows are the same to the bit; a regression whose bias holds
the targets' mean (2e5 dollars) differs by dollars at first, 1e-5 of it."""
STEPS = 3
"""Sampled steps in a row with the same output for every row."""
SPAN = 20
"""Steps from the first such sampled step to the last, at least."""
LAYERS = 512
"""Layers read a traced step, at most."""
SATURATING = (nn.Sigmoid, nn.Tanh, nn.Hardtanh, nn.Hardsigmoid, nn.Softsign)


def tensors(value: Any) -> Iterator[torch.Tensor]:
    """The dense tensors of a forward's inputs or output, in order: a tensor, or one level into
    a tuple, list or dict (``ModelOutput``). A sparse one (a graph's adjacency) or a nested one
    has no rows to compare."""
    if isinstance(value, tuple | list):
        values = list(value)
    elif isinstance(value, dict):
        values = list(value.values())
    else:
        values = [value]
    yield from (v for v in values if checks.dense(v))


def spread(x: torch.Tensor, sequence: bool = False) -> torch.Tensor:
    """[largest difference from the first row over a column's largest magnitude, the largest
    magnitude] of ``x``'s rows (dim 0; with ``sequence``, of its dims 0 and 1 together, batch
    and time in either order), on its device. Column by column: a few channels a batch norm
    sent to 1e11 do not hide the others' differences."""
    if sequence and x.dim() == 3:
        rows = x.detach().float().reshape(x.shape[0] * x.shape[1], -1)
    else:
        rows = x.detach().float().reshape(x.shape[0], -1)
    differences = (rows - rows[:1]).abs().amax(0)
    sizes = rows.abs().amax(0)
    shares = differences / sizes.clamp_min(torch.finfo(torch.float32).tiny)
    return torch.stack([shares.amax(), sizes.amax()])


def differing(given: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """1 where the rows of any of these inputs differ, 0 where each has all its rows alike (on
    ``device``: a model split over devices is given inputs on several)."""
    return torch.stack([(x != x[:1]).any().to(device) for x in given]).any().float()


def same(values: Sequence[float]) -> bool:
    """Whether a ``spread`` read back says the rows are the same."""
    return values[0] <= TOLERANCE


class Layer:
    """One layer's rows on a traced step: its input's and output's ``spread``."""

    def __init__(self, name: str, module: nn.Module, given: torch.Tensor, output: torch.Tensor):
        self.name, self.module = name, module
        self.rows = int(output.shape[0])
        self.values = torch.cat([spread(given).to(output.device), spread(output)])
        self.read: list[float] = []  # the values, read back
        self.given, self.output = id(given), id(output)


class ConstantOutputs:
    """``add``: where the finding goes; ``models``: the trained models now."""

    def __init__(self, add: Callable[[Finding], None], models: Callable[[], list[nn.Module]]):
        self.add, self.models = add, models
        self.said = False
        self.steps: list[int] = []  # the sampled steps in a row with the same output
        self.reading: tuple[str, list[int], torch.Tensor] | None = None  # the model's output
        self.given: set[int] = set()  # ids of the model's inputs
        self.tracing = False  # read every layer's rows this step
        self.layers: list[Layer] = []

    def begin_step(self) -> None:
        """A sampled step starts."""
        self.reading, self.layers = None, []

    def note(self, name: str, module: nn.Module, inputs: Any, output: Any) -> None:
        """``module`` (named ``name``) finished a forward in a sampled step (inner layers
        before the model)."""
        if self.said or not module.training or not torch.is_grad_enabled():
            return
        if self.reading is None and any(module is m for m in self.models()):
            self._read_model(name, inputs, output)
        elif self.tracing and not any(True for _ in module.children()):
            given = next(tensors(inputs), None)
            out = next(tensors(output), None)
            if (
                len(self.layers) < LAYERS
                and given is not None
                and out is not None
                and out.dim() >= 1
                and out.shape[0] >= 2
                and given.dim() >= 1
                and given.shape[0] == out.shape[0]
            ):
                self.layers.append(Layer(name, module, given, out))

    def _read_model(self, name: str, inputs: Any, output: Any) -> None:
        first = next(tensors(inputs), None)
        rows = int(first.shape[0]) if first is not None and first.dim() >= 1 else None
        out = next((t for t in tensors(output) if _read(t, rows)), None)
        if out is None or out.numel() == 0:
            return
        values = spread(out, sequence=True)
        # all its inputs of as many rows: model(t, x) of one diffusion time a batch differs
        given = [x for x in tensors(inputs) if x.dim() >= 1 and x.shape[0] == rows]
        if given and rows is not None and rows >= 2:
            values = torch.cat([values, differing(given, values.device)[None]])
        self.reading = (name, list(out.shape), values)
        self.given = {id(x) for x in tensors(inputs)}

    def judge(self, step: int, still: bool = False) -> None:
        """The sampled step ``step`` ended (``still``: its every gradient exactly zero): read
        its values back (one host read)."""
        if self.said or self.reading is None or still:
            self.reading, self.layers = None, []
            return
        name, shape, values = self.reading
        layers = self.layers
        self.reading, self.layers = None, []
        read = torch.cat([values, *(layer.values.to(values.device) for layer in layers)]).tolist()
        given_same = len(values) == 3 and read[2] == 0  # (inputs differing at all count)
        if not same(read[:2]) or given_same:
            self.steps, self.tracing = [], False
            return
        self.steps.append(step)
        self.tracing = True
        if len(self.steps) < STEPS or step - self.steps[0] < SPAN:
            return
        at = len(values)  # then 4 values a layer
        for layer in layers:
            layer.read = read[at : at + 4]
            at += 4
        self.said = True
        self.add(_finding(name, shape, self.steps, layers, self.given))


def _read(t: torch.Tensor, rows: int | None) -> bool:
    """Whether ``t`` is a model's output to read for ``rows`` (its first input's dim 0; None:
    no positional input): floating, trained through (a constant buffer returned is not), of 2
    rows or more that are not one row broadcast (``prior.expand(B, C)``: the same by design);
    of ``rows`` rows, or, not knowing them, 2-dim or more (a [C] vector beside the logits is
    no batch)."""
    return (
        t.is_floating_point()
        and t.requires_grad
        and t.dim() >= (1 if rows is not None else 2)
        and t.shape[0] >= 2
        and t.stride(0) != 0
        and (rows is None or t.shape[0] == rows)
    )


def _finding(
    name: str, shape: list[int], steps: list[int], layers: list[Layer], given: set[int]
) -> Finding:
    rows = shape[0]
    where, why = _where(layers, rows, given)
    along = "dims 0 and 1" if len(shape) == 3 else "dim 0"
    message = (
        f"{name}'s output {shape} is the same all along {along}, for every example of the "
        f"batch, on {len(steps)} sampled steps in a row (steps {steps[0]}-{steps[-1]}), while its inputs "
        "differ: whatever it is given, it predicts one thing, and its loss can fall no lower "
        "than the best constant's"
    )
    if why:
        message += f". {why}"
    return Finding(
        "outputs-constant",
        "error",
        message,
        where=where or name,
        evidence={"output": shape, "steps": steps[-STEPS:], **({"layer": where} if where else {})},
    )


def _where(layers: list[Layer], rows: int, inputs: set[int]) -> tuple[str, str]:
    """(the layer, what it says) where the rows stop differing, from a traced step's layers;
    ("", "") where none was read. The first layer whose input differs and whose output does
    not; else the first given the same for every row, not by the model's inputs (``inputs``:
    their ids; one diffusion time a batch, and what layers make of it alone, are passed)."""
    layers = [layer for layer in layers if layer.rows == rows]
    for layer in layers:
        given, out = layer.read[:2], layer.read[2:]
        if same(out) and not same(given):
            kind = type(layer.module).__name__
            what = _state(layer.module, out[1] == 0)
            return layer.name, f"The rows stop differing at layer {layer.name} ({kind}): {what}"
    constant, varied = set(inputs), None
    for layer in layers:
        given, out = layer.read[:2], layer.read[2:]
        if not same(out):
            varied = layer
        elif layer.given in constant:
            constant.add(layer.output)
        else:
            kind = type(layer.module).__name__
            before = f", after {varied.name}, whose output still differs" if varied else ""
            held = "all zeros" if given[1] == 0 else "the same"
            return layer.name, (
                f"Layer {layer.name} ({kind}) is given {held} for every row{before}: the rows "
                "stop differing in the code between them (a functional ReLU all of whose units "
                "died, a product with zeros, a saturated activation)"
            )
    return "", ""


def _state(module: nn.Module, zeros: bool) -> str:
    """What a layer whose input differs and whose output does not has come to."""
    if zeros and isinstance(module, nn.ReLU | nn.ReLU6):
        return (
            "its output is zero for every unit and row: every unit has died (no input turns "
            "one on: a step too large, or biases set far below zero, put the weights before it "
            "there, and a dead unit gets no gradient to come back)"
        )
    if isinstance(module, SATURATING):
        return "it is saturated: its input is so large that every row gives its limit"
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and not bool(weight.detach().any()):
        return "its weights are all zero"
    if zeros:
        return "its output is all zeros"
    if isinstance(weight, torch.Tensor):
        return (
            "its output is the same vector for every row: what its weights make of each row "
            "rounds away against the rest (weights near zero, or inputs scaled far too small: "
            "an eps of 1e12 for 1e-12)"
        )
    return "its output is the same vector for every row"
