"""What runs while ``treeqa doctor`` sees a trained model evaluated (in eval mode, without
gradients): dropout called as ``F.dropout(x, p)``, whose ``training`` defaults to True, so
``model.eval()`` does not turn it off.

The functional dropouts are wrapped only for the length of an evaluation's forward, so a
training step pays nothing for this check.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from torch.nn import functional as F

from treeqa.health import checks
from treeqa.health.checks import Finding

DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d")
"""Functional dropouts whose ``training`` defaults to True (``alpha_dropout``'s is False)."""


class EvalDropout:
    """``add``: where the finding goes (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.reported = False
        self._originals: dict[str, Callable[..., Any]] = {}

    def begin(self) -> None:
        """An evaluation forward starts: wrap the functional dropouts until ``end``."""
        if self._originals or self.reported:
            return
        me = weakref.ref(self)
        for name in DROPOUTS:
            original = getattr(F, name, None)
            if original is None or getattr(original, "_treeqa_health", False):
                continue
            self._originals[name] = original
            setattr(F, name, _wrap(name, original, me))

    def end(self) -> None:
        for name, original in self._originals.items():
            setattr(F, name, original)
        self._originals.clear()

    def called(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``F.<name>(input, *args, **kwargs)`` ran during an evaluation."""
        if self.reported or len(args) >= 2 or "training" in kwargs:  # nn.Dropout passes it
            return
        p = args[0] if args else kwargs.get("p", 0.5)
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


def _wrap(
    name: str, original: Callable[..., Any], check: weakref.ref[EvalDropout]
) -> Callable[..., Any]:
    def wrapper(input: Any, *args: Any, **kwargs: Any) -> Any:
        me = check()
        if me is not None:
            me.called(name, args, kwargs)
        return original(input, *args, **kwargs)

    wrapper._treeqa_health = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper
