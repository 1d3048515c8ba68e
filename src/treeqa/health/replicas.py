"""``same-data-in-every-worker``: a ``DataLoader`` over an ``IterableDataset`` with
``num_workers`` of 2 or more, whose ``__iter__`` does not split the stream between the workers.
Each worker process runs its own copy of the dataset's ``__iter__`` in full (torch splits a
map-style dataset's indices, not a stream), so a pass gives every example once per worker: an
epoch is ``num_workers`` passes over the data, and in a stream read in order consecutive batches
are the same batch, stepped on that many times in a row. The documented pitfall of
``torch.utils.data.IterableDataset``; its fix is ``get_worker_info()`` in ``__iter__``.

From ``Loaders``: an iterator made over such a loader is watched. Its batches come in turn from
its workers (batch i from worker i mod W, torch's in-order delivery), and each batch's rows are
hashed on the device (``heldout.row_hashes`` of each tensor with a batch dim, joined: the row's
label and inputs together). After ``READ`` batches of the pass, each time they double, and at
``ROWS`` rows (one host read), the workers' streams are read side by side: 90% of the places
alike in every worker's stream (the j-th row each gave) make the finding. A pass read to its
end (the iterator's last ``__next__`` gave no batch: its next pass is made, or the run ends) is
read whole: 90% of the rows given by another worker too make it, where no more than 30% of a
worker's own rows repeat within its stream (a shuffle buffer in each worker orders the stream
apart, but each still gives every row; workers drawing with replacement from one pool share
most rows, and repeat many within their own). Neither where more than 60% of a worker's own
rows repeat within its stream (data of few distinct rows, a constant batch given again and
again on purpose). Both at the line that iterated the loader. A loader whose workers each draw
fresh random examples (torch seeds each worker apart) or each read their own shard has no rows
in common between them; a stream that repeats some examples on purpose (an easy third twice)
and is split by worker has its copies at other places, and some of its rows in one worker
only.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from treeqa.health import sites
from treeqa.health.augmented import batch_tensors
from treeqa.health.findings import Finding
from treeqa.health.heldout import row_hashes

READ = 32
"""The pass's rows are read after this many batches, again each time their count doubles, and
once when ``ROWS`` are hashed."""
ROWS = 1 << 18
"""Rows hashed in one pass at most (a pass longer is not read whole)."""
ALIKE = 0.9
"""The share of places alike in every worker's stream, or of rows given by another worker too
over a whole pass, that counts..."""
ABOVE = 0.3
"""...where the share of rows repeated within a worker's own stream is this much below it (at
most this much, over a whole pass)."""


class WorkerReplicas:
    """``add``: where findings go. ``made(loader, it)`` for each iterator made, ``asking(it)``
    before each ``__next__``, ``batch(it, batch)`` for each batch it gives, ``finish()`` when
    the run ends."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.said = False
        self.watching: weakref.ref[Any] | None = None  # the iterator watched, if any
        self.workers = 0
        self.rows: list[list[torch.Tensor]] = []  # each worker's rows' hashes, batch by batch
        self.batches = 0  # batches it gave
        self.counted = 0  # rows hashed
        self.asked = False  # its last __next__ has given no batch yet (at its end: none came)
        self.where = ""
        self.dataset = ""

    def made(self, loader: DataLoader[Any], it: Any) -> None:
        """``loader`` made the iterator ``it``: one over a stream, read by several workers?"""
        if self.said:
            return
        self.finish()  # (the pass before, read to its end?)
        workers = int(loader.num_workers)
        if not isinstance(loader.dataset, IterableDataset) or workers < 2:
            return
        try:
            self.watching = weakref.ref(it)
        except TypeError:  # (an iterator that takes no weak reference)
            return
        self.workers, self.batches, self.counted, self.asked = workers, 0, 0, False
        self.rows = [[] for _ in range(workers)]
        self.where = sites.user_site()
        self.dataset = type(loader.dataset).__name__

    def asking(self, it: Any) -> None:
        """``it.__next__`` is called."""
        if self.watching is not None and self.watching() is it:
            self.asked = True

    def batch(self, it: Any, batch: Any) -> None:
        """``it`` gave ``batch``."""
        if self.watching is None or self.watching() is not it or self.said:
            return
        self.asked = False
        tensors = [t for t in batch_tensors(batch) if t.shape[0] > 0]
        if not tensors or self.counted >= ROWS:
            self.counted = ROWS + 1  # (a pass not hashed whole is not read whole)
            return
        rows = tensors[0].shape[0]
        if any(t.shape[0] != rows for t in tensors):
            self.counted = ROWS + 1
            return
        with torch.no_grad():
            hashed = torch.zeros(rows, dtype=torch.int64, device=tensors[0].device)
            for k, t in enumerate(tensors):
                part = row_hashes(t.detach().reshape(rows, -1)).to(hashed.device)
                hashed = hashed * 1000003 + part * (2 * k + 1)  # (wraps around, as the hash)
        self.rows[self.batches % self.workers].append(hashed)
        self.batches += 1
        self.counted += rows
        doubled = self.batches >= READ and self.batches & (self.batches - 1) == 0
        if doubled or self.counted >= ROWS:  # (and once at the rows' limit: large batches)
            self._read(whole=False)

    def finish(self) -> None:
        """The watched pass is over (a new one is made, or the run ends): read it whole where
        it was read to its end."""
        if self.watching is not None and self.asked and not self.said and self.counted <= ROWS:
            self._read(whole=True)
        self.watching = None

    def _read(self, whole: bool) -> None:
        """The workers' rows so far: alike place by place; or, of a whole pass, each given by
        another worker too, more than repeated within one?"""
        streams = [torch.cat(r).tolist() for r in self.rows if r]  # (one host read)
        if len(streams) < 2:
            return
        n = min(len(s) for s in streams)
        places = [
            sum(a == b for a, b in zip(s[:n], streams[0][:n], strict=True)) for s in streams[1:]
        ]
        alike = sum(places) / (n * (len(streams) - 1)) if n else 0.0
        total = sum(len(s) for s in streams)
        shared = repeated = 0
        sets = [set(s) for s in streams]
        for k, stream in enumerate(streams):
            others = set().union(*(s for j, s in enumerate(sets) if j != k))
            shared += sum(h in others for h in stream)
            repeated += len(stream) - len(sets[k])
        share, within = shared / total, repeated / total
        if within > ALIKE - ABOVE:
            return  # (a stream of few rows, each worker's repeating them: one batch, on purpose)
        if alike < ALIKE and not (whole and share >= ALIKE and within <= ABOVE):
            return  # (rows drawn with replacement from one pool in each worker repeat)
        self.said = True
        self.watching = None
        w = self.workers
        read = "over the whole pass" if alike < ALIKE else f"in the first {self.batches} batches"
        self.add(
            Finding(
                "same-data-in-every-worker",
                "warning",
                f"a DataLoader over an IterableDataset ({self.dataset}) with num_workers={w} "
                f"gives each example {w} times a pass: every worker process runs the "
                "dataset's __iter__ in full (torch splits a map-style dataset's indices, not a "
                f"stream), and this one does not split it by worker; {read}, {share:.0%} of "
                f"the rows the workers gave were given by another worker too ({within:.0%} "
                f"repeated within one worker's own; {alike:.0%} of the places in their streams "
                f"alike), so an epoch is {w} passes over the data",
                where=self.where,
                evidence={
                    "workers": w,
                    "batches": self.batches,
                    "shared": round(share, 4),
                    "within": round(within, 4),
                    "alike": round(alike, 4),
                    "whole": whole,
                },
            )
        )
