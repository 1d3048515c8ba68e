"""What runs while ``treeqa doctor`` sees a trained model evaluated (in eval mode, without
gradients): dropout called as ``F.dropout(x, p)``, whose ``training`` defaults to True, so
``model.eval()`` does not turn it off; and attention called as
``F.scaled_dot_product_attention(q, k, v, dropout_p=p)``, which has no ``training`` at all.

The functional dropouts are wrapped only for the length of an evaluation's forward, so a
training step pays nothing for this check. A function imported by name into the module that
defines one of the model's classes (``from torch.nn.functional import dropout``) is a name of
that module's own, which wrapping ``F`` does not reach: such names are found once per model
(a look through those modules' globals) and wrapped there too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from torch import nn
from torch.nn import functional as F

from treeqa.health import sites
from treeqa.health.findings import Finding
from treeqa.health.wrap import Wrappers, note_function_calls

DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d")
"""Functional dropouts whose ``training`` defaults to True (``alpha_dropout``'s is False)."""
ATTENTION = "scaled_dot_product_attention"
"""Drops attention weights at ``dropout_p`` whatever the mode (``nn.MultiheadAttention``
passes 0 in eval mode; a hand-written attention block must too)."""


class EvalDropout:
    """``add``: where the finding goes (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.reported = False
        self.wrappers = Wrappers()
        # per model: (module, global name, function) of the functions imported by name
        self.imported: dict[int, list[tuple[ModuleType, str, str]]] = {}

    def begin(self, model: nn.Module | None = None) -> None:
        """An evaluation forward of ``model`` starts: wrap the functional dropouts (in ``F``
        and where the model's own modules imported them by name) until ``end``."""
        if self.wrappers or self.reported:
            return
        imported = self._imported(model) if model is not None else []
        for name in (*DROPOUTS, ATTENTION):
            self.wrappers.add(note_function_calls(F, name, self.called))
        for module, global_name, name in imported:
            self.wrappers.add(note_function_calls(module, global_name, self.called, label=name))

    def _imported(self, model: nn.Module) -> list[tuple[ModuleType, str, str]]:
        found = self.imported.get(id(model))
        if found is None:
            functions = {id(getattr(F, name)): name for name in (*DROPOUTS, ATTENTION)}
            names = {type(m).__module__ for m in model.modules()}
            modules = [sys.modules.get(n) for n in sorted(names) if not n.startswith("torch.")]
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

    def called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``F.<name>(*args, **kwargs)`` ran during an evaluation."""
        if self.reported:
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
        self.reported = True
        self.add(
            Finding(
                "dropout-in-eval",
                "warning",
                f"{call} runs while the model is in eval mode: {why}",
                where=sites.user_site(),
                evidence={"function": name, "p": p},
                fix=fix,
            )
        )
