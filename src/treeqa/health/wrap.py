"""Wrap a method of a library class for the length of a run, to note each instance that calls it.

The class outlives the run, so the wrapper holds the noting method weakly: a finished run's
monitor (and the models it watched) is not kept alive by a class attribute.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any


def note_calls(cls: type, name: str, note: Callable[[Any], None]) -> Callable[[], None] | None:
    """Make ``cls.name`` call the bound method ``note(instance)`` before it runs. Returns the
    undo, or None when a monitor has wrapped it already (the one that did notes the calls)."""
    original = vars(cls)[name]
    if getattr(original, "_treeqa_health", False):
        return None
    noted = weakref.WeakMethod(note)

    def wrapper(instance: Any, *args: Any, **kwargs: Any) -> Any:
        method = noted()
        if method is not None:
            method(instance)
        return original(instance, *args, **kwargs)

    wrapper._treeqa_health = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(cls, name, wrapper)
    return lambda: setattr(cls, name, original)
