"""Dropouts that drop what they should not.

- ``dropout-in-eval``: while ``treeqa doctor`` sees a trained model evaluated (in eval mode,
  without gradients), dropout called as ``F.dropout(x, p)``, whose ``training`` defaults to
  True, so ``model.eval()`` does not turn it off; and attention called as
  ``F.scaled_dot_product_attention(q, k, v, dropout_p=p)``, which has no ``training`` at all.
- ``dropout-as-keep-probability``: a dropout that trains with ``p`` of ``KEEP`` or more.
  TensorFlow 1's ``tf.nn.dropout(x, keep_prob=0.8)`` and many papers' "keep rate" name the
  share of units kept; PyTorch's ``p`` (``nn.Dropout(p)``, ``F.dropout(x, p)``, the
  ``dropout=`` of a recurrent layer or an attention) the share dropped. Ported as written, a
  keep probability of 0.8 or 0.9 drops 80% or 90% of the units at each step and multiplies the
  rest by 5 or 10; 1.0, no dropout at all, drops everything. Layers are read on sampled steps'
  forwards (``layer_dropout``, called by ``model_inputs``), the functional dropouts here.

The functional dropouts are wrapped only for the length of an evaluation's forward, or of a
trained model's forward on a sampled step, so an ordinary training step pays nothing for these
checks. A function imported by name into the module that defines one of the model's classes
(``from torch.nn.functional import dropout``) is a name of that module's own, which wrapping
``F`` does not reach: such names are found once per model (a look through those modules'
globals) and wrapped there too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_function_calls

DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d")
"""Functional dropouts whose ``training`` defaults to True (``alpha_dropout``'s is False)."""
ALPHA = ("alpha_dropout", "feature_alpha_dropout")
"""Functional dropouts whose ``training`` defaults to False."""
ATTENTION = "scaled_dot_product_attention"
"""Drops attention weights at ``dropout_p`` whatever the mode (``nn.MultiheadAttention``
passes 0 in eval mode; a hand-written attention block must too)."""
HERE = str(Path(__file__).parent)
KEEP = 0.8
"""A dropout's ``p`` at or above which it reads as a keep probability: TensorFlow's keep_prob
of 0.8 or 0.9 ported as PyTorch's drop probability. Dropout meant as such stays at 0.7 or
below (0.5 in the dropout paper's hidden layers, 0.6 in GAT's)."""


class Dropouts:
    """``add``: where the findings go (``HealthMonitor.add``). ``begin(model)`` before an
    evaluation's forward, ``begin(model, training=True)`` before a trained model's forward on
    a sampled step, ``end()`` after it."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.reported: set[str] = set()  # the codes said
        self.wrappers = Wrappers()
        # per model: (module, global name, function) of the functions imported by name
        self.imported: dict[int, list[tuple[ModuleType, str, str]]] = {}

    def begin(self, model: nn.Module | None = None, training: bool = False) -> None:
        """A forward of ``model`` starts: wrap the functional dropouts (in ``F`` and where the
        model's own modules imported them by name) until ``end``."""
        code = "dropout-as-keep-probability" if training else "dropout-in-eval"
        if self.wrappers or code in self.reported:
            return
        names = (*DROPOUTS, *ALPHA) if training else (*DROPOUTS, ATTENTION)
        note = self.trained if training else self.evaluated
        imported = self._imported(model) if model is not None else []
        for name in names:
            self.wrappers.add(note_function_calls(F, name, note))
        for module, global_name, name in imported:
            if name in names:
                self.wrappers.add(note_function_calls(module, global_name, note, label=name))

    def _imported(self, model: nn.Module) -> list[tuple[ModuleType, str, str]]:
        found = self.imported.get(id(model))
        if found is None:
            names = (*DROPOUTS, *ALPHA, ATTENTION)
            functions = {id(getattr(F, name)): name for name in names}
            owners = {type(m).__module__ for m in model.modules()}
            modules = [sys.modules.get(n) for n in sorted(owners) if not n.startswith("torch.")]
            found = [
                (module, global_name, functions[id(value)])
                for module in modules
                if module is not None
                for global_name, value in list(vars(module).items())
                if id(value) in functions
            ]
            self.imported[id(model)] = found
        return found

    def end(self) -> None:
        self.wrappers.undo()

    def _say(self, found: Finding) -> None:
        self.reported.add(found.code)
        self.wrappers.undo()  # nothing more to look for in this forward
        self.add(found)

    def evaluated(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``F.<name>(*args, **kwargs)`` ran during an evaluation."""
        if "dropout-in-eval" in self.reported:
            return
        if name == ATTENTION:  # (query, key, value, attn_mask, dropout_p, ...)
            p = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
            call = f"F.{name}(q, k, v, dropout_p={p:g})" if isinstance(p, float | int) else ""
            why = "it has no training flag, so attention dropout stays on in evaluation"
            fix = "pass dropout_p=self.p if self.training else 0.0 (as nn.MultiheadAttention does)"
        else:  # F.dropout(input, p, training, inplace): nn.Dropout passes training
            if len(args) >= 3 or "training" in kwargs:
                return
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            call = f"F.{name}(x, p={p:g})" if isinstance(p, float | int) else ""
            why = "its training defaults to True, so dropout stays on in evaluation"
            fix = ""  # the code's own
        if not call or p <= 0:
            return
        self._say(
            Finding(
                "dropout-in-eval",
                "warning",
                f"{call} runs while the model is in eval mode: {why}",
                where=sites.user_site(),
                evidence={"function": name, "p": p},
                fix=fix,
            )
        )

    def trained(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``F.<name>(*args, **kwargs)`` ran in a trained model's forward on a sampled step."""
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        training = args[2] if len(args) > 2 else kwargs.get("training", name in DROPOUTS)
        if not isinstance(p, float | int) or p < KEEP or not training or _torch_called():
            return  # (a layer's own call: ``layer_dropout`` names the layer)
        given = args[0] if args else kwargs.get("input")
        if isinstance(given, torch.Tensor) and not given.requires_grad and bool((given == 1).all()):
            return  # a mask made by dropping ones (word dropout): its scale is never read
        self._say(
            keep_probability(float(p), f"F.{name}(x, p={p:g}) in training", sites.user_site())
        )


def _torch_called() -> bool:
    """Whether the wrapped function was called by torch's own code (an ``nn.Dropout``'s
    forward, ``F.multi_head_attention_forward``), not the script's."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(HERE):  # the wrapper's
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(sites.TORCH_DIR)


def rate(module: nn.Module) -> tuple[float, str] | None:
    """(p, its argument's name) of a layer that drops units while it trains: a dropout, a
    recurrent layer's between its layers, an attention's on its weights. None otherwise (a
    forward without gradients trains nothing: a saliency probe run in training mode)."""
    if not module.training or not torch.is_grad_enabled():
        return None
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return float(module.p), "p"
    if isinstance(module, nn.RNNBase) and module.num_layers > 1:
        return float(module.dropout), "dropout"
    if isinstance(module, nn.MultiheadAttention):
        return float(module.dropout), "dropout"
    return None


def layer_dropout(name: str, module: nn.Module) -> Finding | None:
    """A finding where ``module`` (named ``name``) trains with a dropout of ``KEEP`` or more."""
    found = rate(module)
    if found is None or found[0] < KEEP:
        return None
    p, argument = found
    what = f"{name} ({type(module).__name__}, {argument}={p:g})"
    return keep_probability(p, what, f"{name} ({type(module).__name__})", layer=name)


def keep_probability(p: float, what: str, where: str, layer: str = "") -> Finding:
    """``dropout-as-keep-probability`` for a dropout of ``p`` (``what``, at ``where``)."""
    if p >= 1:
        effect = (
            "drops every unit in training: its output is all zeros, so nothing before it "
            "learns, and evaluation, without dropout, runs a network that training never saw"
        )
    else:
        effect = (
            f"drops {p:.0%} of the units at each training step and multiplies the rest by "
            f"{1 / (1 - p):.3g}, so the model trains through far more noise than meant"
        )
    return Finding(
        "dropout-as-keep-probability",
        "warning",
        f"{what} {effect}: PyTorch's p is the probability of dropping a unit, and a keep "
        f"probability of {p:g} (TensorFlow's keep_prob, a paper's keep rate) is p={1 - p:.2g}",
        where=where,
        evidence={"p": p, **({"layer": layer} if layer else {})},
    )
