"""``same-data-in-every-worker``: an IterableDataset read by several DataLoader workers, each of
which yields the whole stream; and streams split by worker, read by one process, drawn at
random in each worker, or indexed (a map-style dataset, which torch splits itself)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
CODE = "same-data-in-every-worker"
SCRIPT = """
import itertools

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

torch.manual_seed(0)
x = torch.randn(3000, 8)
y = (x[:, :3].sum(1) > 0).long()


class Stream(IterableDataset):
    def __iter__(self):
        rows = zip(x, y)
        ROWS
        return iter(rows)


class Drawn(IterableDataset):
    def __iter__(self):
        for _ in range(1500):
            v = torch.randn(8)
            yield v, (v[:3].sum() > 0).long()


class Pool(IterableDataset):
    def __iter__(self):  # draws with replacement from one pool (each worker seeded apart)
        for i in torch.randint(0, 400, (600,)).tolist():
            yield x[i], y[i]


class Constant(IterableDataset):
    def __iter__(self):
        for _ in range(100):
            yield x[:200], y[:200]


class Indexed(Dataset):
    def __len__(self):
        return len(x)

    def __getitem__(self, i):
        return x[i], y[i]


model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = LOADER
for xb, yb in loader:
    loss = nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
SPLIT = """info = get_worker_info()
        if info is not None:
            rows = itertools.islice(rows, info.id, None, info.num_workers)"""


def _run(doctor: Doctor, loader: str, rows: str = "pass") -> list[dict[str, Any]]:
    return doctor(SCRIPT.replace("LOADER", loader).replace("ROWS", rows), CODE)


@pytest.mark.parametrize("workers", [2, 3])
def test_a_stream_read_whole_by_each_worker_is_named(doctor_script: Doctor, workers: int) -> None:
    found = _run(doctor_script, f"DataLoader(Stream(), batch_size=20, num_workers={workers})")
    assert len(found) == 1, found
    assert found[0]["evidence"]["workers"] == workers
    assert found[0]["evidence"]["shared"] > 0.9
    assert "script.py" in found[0]["where"]


@pytest.mark.parametrize(
    ("loader", "rows"),
    [  # passes of 3 batches a worker, read whole at their end
        ("DataLoader(Stream(), batch_size=500, num_workers=2)", "pass"),
        (  # each worker shuffles the whole stream its own way (torch seeds them apart)
            "DataLoader(Stream(), batch_size=20, num_workers=2)",
            "rows = ((x[i], y[i]) for i in torch.randperm(len(x)).tolist())",
        ),
    ],
)
def test_a_stream_read_whole_by_each_worker_in_short_or_shuffled_passes_is_named(
    doctor_script: Doctor, loader: str, rows: str
) -> None:
    script = SCRIPT.replace("LOADER", loader).replace("ROWS", rows)
    found = doctor_script(
        script.replace("for xb, yb in loader:", "for xb, yb in [*loader, *loader]:"), CODE
    )
    assert len(found) == 1, found
    assert found[0]["evidence"]["whole"] is True


def test_a_stream_of_few_distinct_rows_read_whole_by_each_worker_is_named(
    doctor_script: Doctor,
) -> None:
    """Rows repeated within the stream (a few distinct values) are not what another worker
    gave too: the stream's duplicates are measured within one worker's own rows."""
    found = _run(
        doctor_script,
        "DataLoader(Stream(), batch_size=20, num_workers=2)",
        "rows = ((x[i % 1000].round(), y[i % 1000]) for i in range(3000))",
    )
    assert len(found) == 1, found


@pytest.mark.parametrize(
    ("loader", "rows"),
    [
        ("DataLoader(Stream(), batch_size=20, num_workers=2)", SPLIT),
        ("DataLoader(Stream(), batch_size=20, num_workers=0)", "pass"),
        ("DataLoader(Drawn(), batch_size=20, num_workers=2)", "pass"),
        ("DataLoader(Indexed(), batch_size=20, num_workers=2, shuffle=True)", "pass"),
        # 4 workers drawing with replacement from one pool
        ("DataLoader(Pool(), batch_size=20, num_workers=4)", "pass"),
        # one full batch given again and again by each worker, on purpose
        ("DataLoader(Constant(), batch_size=None, num_workers=2)", "pass"),
        (  # a stream of few distinct rows, split by worker
            "DataLoader(Stream(), batch_size=20, num_workers=2)",
            "rows = ((x[i % 50].round(), y[i % 50]) for i in range(3000))\n        " + SPLIT,
        ),
    ],
)
def test_streams_split_by_worker_or_drawn_in_each_are_clean(
    doctor_script: Doctor, loader: str, rows: str
) -> None:
    assert _run(doctor_script, loader, rows) == []
