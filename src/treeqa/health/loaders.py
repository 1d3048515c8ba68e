"""The most worker processes of any DataLoader iterated during the run (``input-bound``'s advice).

A loader may be gone by the time the check runs (made inside a function per epoch, or the
script ends before the last check), so its workers are noted when its iterator is made:
``DataLoader.__iter__`` is wrapped for the run (once an epoch: no per-step cost).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader


class LoaderWorkers:
    """``most``: the most ``num_workers`` of a DataLoader iterated while installed."""

    def __init__(self) -> None:
        self.most = 0
        self._original: Callable[[DataLoader], Any] | None = None

    def install(self) -> None:
        original = vars(DataLoader)["__iter__"]
        if getattr(original, "_treeqa_health", False):  # another monitor counts them
            return
        self._original = original
        workers = weakref.ref(self)  # the class outlives the run; it must not keep the monitor

        def __iter__(loader: DataLoader) -> Any:
            me = workers()
            if me is not None:
                me.most = max(me.most, int(loader.num_workers))
            return original(loader)

        __iter__._treeqa_health = True  # type: ignore[attr-defined]
        __iter__.__wrapped__ = original  # type: ignore[attr-defined]
        DataLoader.__iter__ = __iter__  # type: ignore[method-assign]

    def uninstall(self) -> None:
        if self._original is not None:
            DataLoader.__iter__ = self._original  # type: ignore[method-assign]
            self._original = None
