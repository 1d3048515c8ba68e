"""``input-bound``'s advice knows the DataLoader workers of the run, also once the loader is gone."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from torch.utils.data import DataLoader

from treeqa.health import run_doctor

PER_EPOCH_LOADER = """
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        time.sleep(0.01)  # preprocessing too slow even for two workers
        return torch.full((8,), float(i)), i % 2


model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def train_one_epoch():
    loader = DataLoader(Slow(), batch_size=4, num_workers=2)  # gone when the function returns
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


for epoch in range(2):
    train_one_epoch()
"""


def test_input_bound_advice_counts_workers_of_a_loader_already_gone(tmp_path: Path) -> None:
    """The only input-bound check runs at the end (every=50 > 24 steps), after both epochs'
    loaders are gone: the advice must still say the script already uses workers."""
    original = DataLoader.__iter__
    script = tmp_path / "train.py"
    script.write_text(PER_EPOCH_LOADER)
    with contextlib.redirect_stdout(io.StringIO()):
        code, report = run_doctor(["python", str(script)], every=50, stream=io.StringIO())
    assert code == 0 and report["steps"] == 24
    found = next(f for f in report["findings"] if f["code"] == "input-bound")
    assert found["evidence"]["dataloader_workers"] == 2
    assert "already has 2 workers" in found["fix"] and "num_workers>0" not in found["fix"]
    assert DataLoader.__iter__ is original  # the wrapper is for the run only
