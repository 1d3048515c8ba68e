"""An epoch's batches as index groups, each collated only when it is read.

Collating (a forest's level plan, a QA batch's padded tensors) is real CPU work: under torchrun
``fit()`` reads each process's own positions of the epoch (``distributed.shard``), so no process
collates the batches the others train on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, overload

import numpy as np

T = TypeVar("T")


class Collated(Sequence[T], Generic[T]):
    """``collate(groups[i])`` as item i: the rows of batch i, in the epoch's order."""

    def __init__(self, groups: Sequence[np.ndarray], collate: Callable[[np.ndarray], T]):
        self.groups, self.collate = groups, collate

    def __len__(self) -> int:
        return len(self.groups)

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> Collated[T]: ...
    def __getitem__(self, i: int | slice) -> T | Collated[T]:
        if isinstance(i, slice):
            return Collated(self.groups[i], self.collate)
        return self.collate(self.groups[i])
