"""``worker-memory-copied``: the dataset's containers of Python objects found (through the
datasets that wrap it), the workers' memory read, and a forked process's copy of a list it
reads measured as the workers' is."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import torch
from torch.utils.data import ConcatDataset, Dataset, Subset

from treeqa.health.worker_memory import HELD_MB, _addresses, _copied, _memory, _own_pages, held


class Records(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, n: int):
        self.rows = [{"id": i, "x": [float(i % 7), 1.0, 2.0], "y": i % 2} for i in range(n)]
        self.name = "records"

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.tensor(self.rows[i]["x"]), self.rows[i]["y"]


class Arrays(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, n: int):
        self.x = np.zeros((n, 3), np.float32)
        self.y = np.zeros(n, np.int64)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(self.x[i]), int(self.y[i])


def test_a_large_list_of_records_is_found_and_sized() -> None:
    found = held(Records(300_000))
    assert found is not None
    assert (found.name, found.kind, found.items, found.item) == (
        "dataset.rows",
        "list",
        300_000,
        "dict",
    )
    assert HELD_MB <= found.mb < 400  # ~110 MB: a dict, a list and three floats a record
    line = Records.__init__.__code__.co_firstlineno
    assert found.where.endswith(f"test_worker_memory.py:{line}")  # where the list is made


def test_a_list_is_found_through_subsets_and_concatenations() -> None:
    records = Records(300_000)
    found = held(Subset(records, range(1000)))
    assert found is not None and found.name == "dataset.dataset.rows"
    found = held(ConcatDataset([Arrays(10), records]))
    assert found is not None and found.name == "dataset.datasets[1].rows"


class Cache:
    rows: list[tuple[int, float]] = []


class ReadsTheCache(Dataset[tuple[int, float]]):
    def __len__(self) -> int:
        return len(Cache.rows)

    def __getitem__(self, i: int) -> tuple[int, float]:
        return Cache.rows[i]


def test_a_list_another_class_keeps_for_the_dataset_is_found() -> None:
    Cache.rows = [(i, i / 3) for i in range(600_000)]
    try:
        found = held(ReadsTheCache())
        assert found is not None and found.name == "Cache.rows" and found.item == "tuple"
    finally:
        Cache.rows = []


class Store:
    def __init__(self, n: int):
        self.items = [(i, str(i)) for i in range(n)]


class Columns(Dataset[tuple[str, int]]):
    def __init__(self, n: int):
        self.data = {"text": [f"w{i} w{i + 1}" for i in range(n)], "label": [0] * n}
        self.store = Store(10)

    def __len__(self) -> int:
        return len(self.data["label"])

    def __getitem__(self, i: int) -> tuple[str, int]:
        return self.data["text"][i], self.data["label"][i]


def test_lists_in_a_dict_of_columns_or_in_a_store_object_are_found() -> None:
    found = held(Columns(1_500_000))
    assert found is not None and found.name == "dataset.data['text']" and found.item == "str"
    columns = Columns(10)
    columns.store = Store(800_000)  # an object of the dataset's own module
    found = held(columns)
    assert found is not None and found.name == "dataset.store.items"


def test_arrays_and_small_lists_are_not_found() -> None:
    assert held(Arrays(1_000_000)) is None
    assert held(Records(5_000)) is None  # fewer than ITEMS
    assert held(Records(20_000)) is None  # ~7 MB


def test_a_forked_process_reading_a_list_copies_it() -> None:
    """What the check reads off the workers, on a plain forked child: its private memory rises
    as its shared memory falls while it reads a list of ~110 MB, and the records' pages become
    its own."""
    rows = Records(300_000).rows
    context = multiprocessing.get_context("fork")
    ready, go, done, end = (context.Event() for _ in range(4))

    def child() -> None:
        ready.set()
        go.wait()
        total = sum(r["y"] for r in rows)  # reads every record
        done.set()
        end.wait(60)  # read while it lives
        os._exit(0 if total >= 0 else 1)

    process = context.Process(target=child)
    process.start()
    try:
        assert ready.wait(30)
        first: dict[int, tuple[float, float]] = {}
        assert process.pid is not None
        assert _copied(first, process.pid) == 0.0  # the first read
        addresses = _addresses(rows)  # (read without touching the records)
        before = _own_pages(process.pid, addresses)
        go.set()
        assert done.wait(60)
        assert _copied(first, process.pid) >= 32.0
        after = _own_pages(process.pid, addresses)  # the records' pages are its own now
        assert before is not None and after is not None and before < 0.2 and after > 0.9
        end.set()
    finally:
        process.kill()
        process.join()


def test_a_process_memory_is_read_as_private_and_shared() -> None:
    read = _memory(os.getpid())
    assert read is not None and read[0] > 0 and read[1] >= 0
    assert _memory(2**22 + 12345) is None  # no such process
