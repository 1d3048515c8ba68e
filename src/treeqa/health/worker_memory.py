"""DataLoader workers copying the main process's memory as they read a dataset kept in Python
objects (``worker-memory-copied``).

Forked workers share the main process's memory until they write to it, and reading a Python
object writes it: its reference count goes up and down, and a full garbage collection marks
every container. So each page of a list of dicts, strings, tuples or small arrays that a worker
reads becomes its own copy, and a dataset of such objects read at random is soon copied whole
into every worker: (workers + 1) times its memory where one copy should do (PyTorch issue
13246; its documentation's advice is to keep such data in NumPy or PyArrow arrays or tensors,
which are one object each).

A loader with worker processes started by ``fork`` has its dataset looked through once
(``held``: its attributes and its class's, through ``Subset``, ``ConcatDataset`` and objects
of classes of its own module, the values of small dicts (columns), and the globals its
``__getitem__`` reads, a class's attributes among them) for a
container of ``ITEMS`` Python objects or more whose estimated size (``SAMPLED`` of them measured)
is ``HELD_MB`` or more. Only then are its workers read, from ``/proc/<pid>/smaps_rollup``
(about 3 ms a worker), at the first step after they start and then at gaps that double to
``MOST_GAP_S``: a worker's memory copied since its first read is its private memory's rise,
where its shared memory fell as much (memory of its own, a cache it fills, takes nothing from
the shared). A worker that copied ``COPIED_MB`` or more, and a quarter of the container's size
or more, with half or more of ``PAGES`` of the container's items on pages it holds as its own
(its ``/proc/<pid>/pagemap``: so a copy that is not of the container, as a worker's first full
garbage collection makes of the interpreter's objects, is not taken for one) makes the finding, at the line that defines the dataset's ``__init__`` (told again,
the same finding, as the copy grows a quarter more). Not judged:
workers started by ``spawn`` or ``forkserver`` (each gets a pickled copy of the dataset at
once), data reached otherwise (through a function the dataset calls), systems without
``/proc``.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset

from treeqa.health.findings import Finding

ITEMS = 10_000
"""Items of a container for it to be measured."""
COLUMNS = 64
"""Keys of a dict up to which its values are looked at as the dataset's columns."""
SAMPLED = 32
"""Items measured of it, spread over it."""
HELD_MB = 64.0
"""Estimated size of the container's objects for its workers to be read."""
PAGES = 64
"""Items of the container whose pages are looked up in a worker's page map."""
SHARE = 0.5
"""Share of them on pages the worker holds as its own copy for the finding (a worker's first
full garbage collection copies ~60-75 MB of the interpreter's objects whatever the dataset: not
the pages of strings it never read)."""
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
COPIED_MB = 64.0
"""Memory a worker copied from the main process for the finding (a full garbage collection in a
worker copies the pages of every container the main process made, ~60 MB with torch alone)."""
WORKERS_READ = 4
"""Workers read at most, the first."""
FIRST_GAP_S, MOST_GAP_S = 0.25, 4.0


@dataclass
class Held:
    """A dataset's container of Python objects: its name, kind, length and items' type, and its
    estimated size in MB."""

    name: str
    kind: str
    items: int
    item: str
    mb: float
    where: str
    addresses: list[int]  # of items spread over it, to find their pages (none: not read)


class WorkerMemory:
    """``add``: where the finding goes (``HealthMonitor.add``)."""

    def __init__(self, add: Callable[[Finding], None]):
        self.add = add
        self.held: dict[int, Held | None] = {}  # dataset id -> its container, once looked at
        self.watching: tuple[weakref.ref[Any], Held, int] | None = None  # iterator, workers
        self.first: dict[int, tuple[float, float]] = {}  # pid -> (private, shared) MB first
        self.next_read = 0.0
        self.gap = 0.0
        self.said = 0.0  # the copy the finding last told of (MB; 0: none yet)

    def made(self, loader: DataLoader[Any], it: Any) -> None:
        """``loader`` made the iterator ``it`` (its workers are starting)."""
        if not loader.num_workers or not _forks(loader):
            return
        dataset = loader.dataset
        if id(dataset) not in self.held:
            self.held[id(dataset)] = held(dataset)
        found = self.held[id(dataset)]
        if found is None:
            return
        try:
            self.watching = (weakref.ref(it), found, int(loader.num_workers))
        except TypeError:  # an iterator that takes no weak reference
            return
        self.next_read, self.gap = 0.0, FIRST_GAP_S / 2

    def end_step(self) -> None:
        """The clock stepped (``Loaders`` calls it while a loader's workers are watched): they
        are read when their time has come."""
        if self.watching is None or time.perf_counter() < self.next_read:
            return
        it, found, workers = self.watching
        iterator = it()
        if iterator is None:  # its pass is over and gone
            self.watching = None
            return
        processes = [p for p in getattr(iterator, "_workers", None) or [] if p.is_alive()]
        copied = [_copied(self.first, p.pid) for p in processes[:WORKERS_READ]]
        self.gap = min(self.gap * 2, MOST_GAP_S)
        self.next_read = time.perf_counter() + self.gap
        most = max(copied, default=0.0)
        if most < max(COPIED_MB, found.mb / 4, self.said * 1.25):  # first, or grown since
            return
        shares = [_own_pages(p.pid, found.addresses) for p in processes[:WORKERS_READ]]
        share = max((s for s in shares if s is not None), default=None)
        if share is None or share >= SHARE:  # (None: pages unreadable, the memory decides)
            self.said = most
            finding = worker_memory_copied(found, workers, most, share)
            finding.where = found.where
            self.add(finding)


def _forks(loader: DataLoader[Any]) -> bool:
    """The loader's workers are started by ``fork`` (Linux's default up to Python 3.13)."""
    context = loader.multiprocessing_context
    if context is None:
        method = multiprocessing.get_start_method(allow_none=True)
        method = method or multiprocessing.get_context().get_start_method()
    else:
        method = context.get_start_method()
    return method == "fork"


def _copied(first: dict[int, tuple[float, float]], pid: int | None) -> float:
    """MB worker ``pid`` has copied of the main process's memory since its first read."""
    if pid is None:
        return 0.0
    now = _memory(pid)
    if now is None:
        return 0.0
    private, shared = now
    private0, shared0 = first.setdefault(pid, now)
    return max(0.0, min(private - private0, shared0 - shared))


def _addresses(container: Any) -> list[int]:
    """Where ``PAGES`` items of a list or tuple lie, read off its array of pointers (CPython's
    layout: the items themselves untouched, since a reference taken to one writes its count,
    and the main process would copy its page, the workers' then reading as their own); none
    for a dict, or where the layout is not CPython's (the memory alone then decides)."""
    if type(container) not in (list, tuple) or sys.implementation.name != "cpython":
        return []
    start = id(container) + 3 * ctypes.sizeof(ctypes.c_void_p)  # past the object's head
    if type(container) is list:
        start = ctypes.c_void_p.from_address(start).value or 0
    n = len(container)

    def item(i: int) -> int:
        return ctypes.c_void_p.from_address(start + i * ctypes.sizeof(ctypes.c_void_p)).value or 0

    if item(0) != id(container[0]):  # (the first item's page is read to check the layout)
        return []
    return [item((2 * i + 1) * n // (2 * PAGES)) for i in range(PAGES)]


def _own_pages(pid: int, addresses: list[int]) -> float | None:
    """The share of ``addresses`` whose pages process ``pid`` holds as its own copy (mapped
    there alone: ``/proc/<pid>/pagemap``'s bit 56, present: bit 63); None where it cannot be
    read."""
    if not addresses:
        return None
    try:
        fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    except OSError:
        return None
    try:
        own = 0
        for address in addresses:
            entry = int.from_bytes(os.pread(fd, 8, address // PAGE * 8), "little")
            own += (entry >> 63) & (entry >> 56) & 1
        return own / len(addresses)
    except OSError:
        return None
    finally:
        os.close(fd)


def _memory(pid: int) -> tuple[float, float] | None:
    """(private, shared) MB of process ``pid`` (None where it cannot be read)."""
    fields: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    fields[parts[0]] = int(parts[1]) / 1024
    except (OSError, ValueError):
        return None
    private = fields.get("Private_Clean:", 0.0) + fields.get("Private_Dirty:", 0.0)
    shared = fields.get("Shared_Clean:", 0.0) + fields.get("Shared_Dirty:", 0.0)
    return private, shared


def held(dataset: Any, depth: int = 3) -> Held | None:
    """The largest container of Python objects ``dataset`` holds (None: none of ``HELD_MB``)."""
    best: Held | None = None
    for name, value in _inside(_attributes(dataset, "dataset", depth) + _read_globals(dataset)):
        if isinstance(value, list | tuple | dict) and len(value) >= ITEMS:
            mb = _size(value) / 2**20
            if mb >= HELD_MB and (best is None or mb > best.mb):
                items = list(value.values()) if isinstance(value, dict) else value
                kind, item = type(value).__name__, type(items[0]).__name__
                addresses = _addresses(value)
                best = Held(name, kind, len(items), item, mb, _where(dataset), addresses)
    return best


def _attributes(dataset: Any, name: str, depth: int) -> list[tuple[str, Any]]:
    """(name, value) of each attribute of ``dataset`` and its class, and of the datasets it
    wraps (``Subset.dataset``, ``ConcatDataset.datasets``, an attribute that is a Dataset)."""
    found: list[tuple[str, Any]] = []
    if depth == 0:
        return found
    values = {**vars(type(dataset)), **getattr(dataset, "__dict__", {})}
    for key, value in values.items():
        if key.startswith("__"):
            continue
        label = f"{name}.{key}"
        if isinstance(value, Dataset) or _own(value, dataset):
            found += _attributes(value, label, depth - 1)
        elif isinstance(dataset, ConcatDataset) and key == "datasets":
            for i, inner in enumerate(value):
                found += _attributes(inner, f"{label}[{i}]", depth - 1)
        else:
            found.append((label, value))
    if isinstance(dataset, Subset):
        found += _attributes(dataset.dataset, f"{name}.dataset", depth - 1)
    return found


def _own(value: Any, dataset: Any) -> bool:
    """``value`` is an object of a class of the dataset's own module (a store it keeps)."""
    kind = type(value)
    return hasattr(value, "__dict__") and kind.__module__ == type(dataset).__module__


def _inside(found: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``found``, and the values of each small dict among them (``{"text": [...], "label":
    [...]}``: columns, each a list)."""
    inner = [
        (f"{name}[{key!r}]", v)
        for name, value in found
        if isinstance(value, dict) and len(value) < COLUMNS
        for key, v in value.items()
    ]
    return found + inner


def _read_globals(dataset: Any) -> list[tuple[str, Any]]:
    """(name, value) of the globals the dataset's ``__getitem__`` (or ``__iter__``) reads by
    name, and of the attributes of those that are classes (a cache kept on another class)."""
    found: list[tuple[str, Any]] = []
    for method in ("__getitem__", "__iter__"):
        function = getattr(type(dataset), method, None)
        code, space = getattr(function, "__code__", None), getattr(function, "__globals__", {})
        if code is None:
            continue
        for name in code.co_names:
            value = space.get(name)
            if isinstance(value, type) and value.__module__ == function.__module__:
                found += [(f"{name}.{k}", v) for k, v in vars(value).items() if k[:2] != "__"]
            elif value is not None:
                found.append((name, value))
    return found


def _size(container: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> float:
    """Bytes of ``container`` and its items, estimated from ``SAMPLED`` of them (two levels
    down: a record's fields and their values)."""
    items = list(container.values()) if isinstance(container, dict) else container
    n = len(items)
    picked = [items[i * n // SAMPLED] for i in range(SAMPLED)]
    keys = sys.getsizeof(0) * n if isinstance(container, dict) else 0  # (about: most keys)
    each = sum(_deep(item, 2) for item in picked) / SAMPLED
    return sys.getsizeof(container) + keys + n * each


def _deep(value: Any, depth: int) -> float:
    size = float(sys.getsizeof(value))
    if depth == 0 or isinstance(value, str | bytes):
        return size
    inner = list(value.values()) if isinstance(value, dict) else value
    if isinstance(inner, list | tuple) and inner:
        picked = inner[:: max(1, len(inner) // 8)][:8]
        size += len(inner) * sum(_deep(v, depth - 1) for v in picked) / len(picked)
    return size


def _where(dataset: Any) -> str:
    """Where the dataset's class defines ``__init__`` (where it stores its data), off its code
    object (no source file read)."""
    code = getattr(getattr(type(dataset), "__init__", None), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else type(dataset).__name__


def worker_memory_copied(found: Held, workers: int, most: float, share: float | None) -> Finding:
    return Finding(
        "worker-memory-copied",
        "warning",
        f"a DataLoader worker copied {most:,.0f} MB of the main process's memory as it read "
        f"{found.name} (a {found.kind} of {found.items:,} {found.item} objects, "
        f"~{found.mb:,.0f} MB): "
        "reading a Python object writes its reference count, so each page of them a forked "
        f"worker reads becomes its own copy; {workers} workers hold up to {workers} more "
        "copies of the dataset",
        evidence={
            "workers": workers,
            "copied_mb": round(most, 1),
            "container": found.name,
            "items": found.items,
            "item": found.item,
            "held_mb": round(found.mb, 1),
            "items_on_copied_pages": None if share is None else round(share, 2),
        },
    )
