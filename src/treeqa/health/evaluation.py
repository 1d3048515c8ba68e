"""What runs while ``treeqa doctor`` sees a trained model evaluated (in eval mode, without
gradients): dropout called as ``F.dropout(x, p)``, whose ``training`` defaults to True, so
``model.eval()`` does not turn it off.

The functional dropouts are wrapped only for the length of an evaluation's forward, so a
training step pays nothing for this check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.nn import functional as F

from treeqa.health import checks
from treeqa.health.checks import Finding
from treeqa.health.wrap import note_function_calls

DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d")
"""Functional dropouts whose ``training`` defaults to True (``alpha_dropout``'s is False)."""


class EvalDropout:
    """``add``: where the finding goes (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.reported = False
        self._undo: list[Callable[[], None]] = []

    def begin(self) -> None:
        """An evaluation forward starts: wrap the functional dropouts until ``end``."""
        if self._undo or self.reported:
            return
        for name in DROPOUTS:
            undo = note_function_calls(F, name, self.called)
            if undo is not None:
                self._undo.append(undo)

    def end(self) -> None:
        while self._undo:
            self._undo.pop()()

    def called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``F.<name>(*args, **kwargs)`` ran during an evaluation."""
        # F.dropout(input, p, training, inplace): nn.Dropout passes training.
        if self.reported or len(args) >= 3 or "training" in kwargs:
            return
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        if not isinstance(p, float | int) or p <= 0:
            return
        self.reported = True
        self.add(
            Finding(
                "dropout-in-eval",
                "warning",
                f"F.{name}(x, p={p:g}) runs without training= while the model is in eval mode: "
                "its training defaults to True, so dropout stays on in evaluation",
                where=checks.user_site(),
                evidence={"function": name, "p": p},
            )
        )
