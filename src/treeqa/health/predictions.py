"""Predictions scored wrongly: what the script does with a trained model's output between its
forwards (an evaluation's metric, a training accuracy).

- ``argmax-over-one-class``: the predicted class taken by ``argmax`` (``max`` or ``topk``
  over a dim) over a dim of size 1 of the output: a binary classifier with one logit
  (``nn.Linear(d, 1)`` under ``BCEWithLogitsLoss``) scored as ``out.argmax(1)`` or
  ``_, pred = torch.max(out, 1)``, copied from multi-class code. The index is 0 in every row:
  every prediction is class 0, and the accuracy is the share of class 0 whatever the model
  learned.
- ``accuracy-broadcast``: predictions of shape ``[N, 1]`` compared with targets of shape
  ``[N]`` (or the other way round) by ``==``, ``eq`` or ``torch.eq``: the comparison broadcasts
  to ``[N, N]``, every prediction against every target, so ``(pred == y).float().mean()`` is
  the share of agreeing pairs (near 0.5 on two balanced classes, whatever the model) and
  ``(pred == y).sum()`` counts up to N * N.

After each forward of a model the clock trains that returns a batch (an evaluation's, without
gradients, in eval mode or not; a training step's, on sampled steps) the reductions and comparisons are wrapped until the next
forward of such a model (the window where its output is scored), so a step that is not
sampled pays nothing. Each call looks at shapes only (no host sync). A reduction counts when
its tensor has the output's shape (``sigmoid(out)``, ``out.data`` too; or the evaluation's
outputs joined) and its dim is of size 1 there; a comparison when its two sides are ``[N, 1]`` and ``[N]`` for the output's batch size
``N`` (or the rows of the evaluation's outputs so far: its predictions joined with
``torch.cat``) and are not views of one tensor (a contrastive loss's mask,
``labels.view(-1, 1) == labels``, compares a batch's labels with themselves on purpose), and
the column is not a view of a vector (``q[:, None] == g``: a match matrix of two label sets
written as one, on purpose). A reduction over a tensor of one value throughout (a softmax over
one mixture component) is none either (one host read).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.relabelled import EvaluationLabels
from treeqa.health.thresholds import Thresholds, same_memory
from treeqa.health.wrap import Wrappers, note_function_calls

REDUCTIONS = ("argmax", "max", "topk")
"""The functions (``torch.X`` and ``Tensor.X``) that pick a class along a dim."""
COMPARISONS = (("__eq__", True), ("eq", True), ("eq", False))
"""``(name, a Tensor method)``: ``pred == y``, ``pred.eq(y)``, ``torch.eq(pred, y)``."""


class Predictions:
    """``add``: where findings go. ``done(output)`` after a trained model's forward (whose
    output is scored), ``begin()`` before the next one, ``end()`` when the run ends."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.reported: set[str] = set()
        self.wrappers = Wrappers()
        self.shapes: list[torch.Size] = []  # the output's tensors', in this window
        self.batch = 0  # their rows
        self.rows = 0  # the outputs' rows since the evaluation began (a window of training: its)
        self.evaluating = False  # the last output was an evaluation's
        self.open = False  # a window's wrappers are in place
        # told of an evaluation's comparisons of class indices (``evaluation-labels-permuted``)
        self.labels: EvaluationLabels | None = None
        self.thresholds = Thresholds(add)  # ``threshold-off-scale``, in the same windows

    def done(self, output: Any, evaluation: bool, model: int = 0) -> None:
        """A trained model's forward returned ``output`` (``evaluation``: in an evaluation,
        else a training step's; ``model``: its id): wrap what scores it."""
        labels = evaluation and self.labels is not None and not self.labels.said
        tensors = [t for t in _output_tensors(output) if t.is_floating_point()]
        self.thresholds.window(tensors, model, evaluation)
        if len(self.reported) == 2 and not labels:
            return
        outputs = [t for t in tensors if t.dim() >= 2 and t.shape[0] >= 2]
        if not outputs:
            return
        self.batch = outputs[0].shape[0]
        self.shapes = [t.shape for t in outputs if t.shape[0] == self.batch]
        self.rows = self.rows + self.batch if evaluation and self.evaluating else self.batch
        self.evaluating = evaluation
        if self.open:
            return
        self.open = True
        if "argmax-over-one-class" not in self.reported and any(1 in t[1:] for t in self.shapes):
            for name in REDUCTIONS:
                self.wrappers.add(note_function_calls(torch, name, self._reduced))
                self.wrappers.add(note_function_calls(torch.Tensor, name, self._reduced))
        if "accuracy-broadcast" not in self.reported or labels:
            for name, method in COMPARISONS:
                owner = torch.Tensor if method else torch
                self.wrappers.add(note_function_calls(owner, name, self._compared))

    def begin(self) -> None:
        """A trained model's forward starts: its last output's window closes (called where
        ``open``)."""
        self.open = False
        self.wrappers.undo()
        self.thresholds.close()

    end = begin  # the run ends

    def _reduced(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``torch.<name>(x, dim)`` or ``x.<name>(dim)`` ran in the window."""
        if not args or not isinstance(args[0], torch.Tensor):
            return
        x, rest = args[0], args[1:]
        if x.shape[0] not in (self.batch, self.rows) or all(
            x.shape[1:] != t[1:] for t in self.shapes
        ):
            return  # (the batch's outputs, or the evaluation's so far joined)
        if name == "topk":  # topk(k, dim=-1, ...)
            k = rest[0] if rest else kwargs.get("k")
            dim = rest[1] if len(rest) > 1 else kwargs.get("dim", -1)
            if k != 1:
                return
        else:  # argmax(dim=None, keepdim=False), max(dim, keepdim): a max of two tensors
            dim = rest[0] if rest else kwargs.get("dim")  # or over everything is no class
        if not isinstance(dim, int) or not -x.dim() <= dim < x.dim() or x.shape[dim] != 1:
            return
        if bool((x == x.flatten()[0]).all()):  # (one host read, once)
            return  # one value throughout: a softmax over one component, picked on purpose
        shape = list(x.shape)
        call = {"argmax": f"argmax(dim={dim})", "max": f"max(dim={dim})", "topk": "topk(1)"}[name]
        self._say(
            Finding(
                "argmax-over-one-class",
                "error",
                f"{call} over a dim of size 1 of the model's output {shape}: the index is 0 "
                "in every row, so every prediction is class 0 and the accuracy is the share "
                "of class 0, whatever the model learned (a single output unit holds one "
                "logit, not a score for each class)",
                where=sites.user_site(),
                evidence={"function": name, "dim": dim, "shape": shape},
            )
        )

    def _compared(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``a == b``, ``a.eq(b)`` or ``torch.eq(a, b)`` ran in the window."""
        if len(args) < 2 or not self.shapes:
            return
        a, b = args[0], args[1]
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            return
        if self.evaluating and self.labels is not None and a.dim() == b.dim() == 1:
            if len(self.shapes[0]) == 2:  # [N] class indices, of [N, C] outputs
                self.labels.compared(a, b, self.shapes[0][1], self.rows)
        if "accuracy-broadcast" in self.reported:
            return
        column, flat = (a, b) if a.dim() == 2 else (b, a)
        n = flat.shape[0] if flat.dim() == 1 else 0
        if column.shape != (n, 1) or n not in (self.batch, self.rows):
            return  # (the batch's, or the evaluation's so far: its batches' outputs joined)
        if same_memory(a, b) or (column._base is not None and column._base.dim() == 1):
            return  # a batch against itself; a column made of a vector: an outer one on purpose
        shapes = [list(a.shape), list(b.shape)]
        self._say(
            Finding(
                "accuracy-broadcast",
                "warning",
                f"predictions compared with targets as {shapes[0]} and {shapes[1]}: the "
                f"comparison broadcasts to [{n}, {n}], every prediction against every "
                "target, so its mean is the share of agreeing pairs (the chance that two "
                "rows share a label: 0.5 on two balanced classes, whatever the model) and its "
                f"sum counts up to {n * n}",
                where=sites.user_site(),
                evidence={"shapes": shapes},
            )
        )

    def _say(self, found: Finding) -> None:
        self.reported.add(found.code)
        self.begin()  # a later window wraps only what is still looked for
        self.add(found)


def _output_tensors(output: Any) -> list[torch.Tensor]:
    """The tensors a forward's output may be scored by (4 at most): itself, those of a tuple,
    list or dict (``logits`` first), an object's (``logits`` first: a dataclass, a named tuple,
    a library's output object)."""
    if isinstance(output, torch.Tensor):
        return [output]
    logits = output.get("logits") if isinstance(output, dict) else getattr(output, "logits", None)
    if isinstance(output, dict):
        values = list(output.values())
    elif isinstance(output, list | tuple):
        values = list(output)
    else:
        values = list(getattr(output, "__dict__", {}).values())
    values = [logits, *values] if isinstance(logits, torch.Tensor) else values
    return [v for v in values if isinstance(v, torch.Tensor)][:4]
