"""The most worker processes of any DataLoader iterated during the run (``input-bound``'s advice).

A loader may be gone by the time the check runs (made inside a function per epoch, or the
script ends before the last check), so its workers are noted when its iterator is made:
``DataLoader.__iter__`` is wrapped for the run (once an epoch: no per-step cost).
"""

from __future__ import annotations

from torch.utils.data import DataLoader

from treeqa.health.wrap import Wrappers, note_calls


class LoaderWorkers:
    """``most``: the most ``num_workers`` of a DataLoader iterated while installed."""

    def __init__(self) -> None:
        self.most = 0
        self.wrappers = Wrappers()

    def install(self) -> None:
        self.wrappers.add(note_calls(DataLoader, "__iter__", self._note))

    def uninstall(self) -> None:
        self.wrappers.undo()

    def _note(self, loader: DataLoader) -> None:
        self.most = max(self.most, int(loader.num_workers))
