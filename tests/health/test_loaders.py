"""The DataLoaders of a run: ``input-bound``'s advice knows their workers, also once a loader is
gone; ``loader-restarted-every-step`` is a new iterator each step, left after a batch."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from treeqa.health import run_doctor, slips
from treeqa.health.findings import Finding
from treeqa.health.loaders import RESTART_STEPS, SORTED_STEPS, Loaders

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


def _restarts(make_loader, per_step, steps: int = RESTART_STEPS) -> list[str]:
    """``per_step(loader)`` draws a step's batches ``steps`` times; the findings made."""
    found: list[Finding] = []
    loaders = Loaders(found.append)
    loaders.install()
    try:
        loader = make_loader()
        for _ in range(steps):
            per_step(loader)
            loaders.end_step()
    finally:
        loaders.uninstall()
    return [f.code for f in found]


def test_a_new_iterator_every_step_left_after_one_batch_is_a_restart() -> None:
    data = TensorDataset(torch.arange(64.0))
    sequential = lambda: DataLoader(data, batch_size=8)  # noqa: E731
    shuffled = lambda: DataLoader(data, batch_size=8, shuffle=True)  # noqa: E731
    first = lambda loader: next(iter(loader))  # noqa: E731
    assert _restarts(sequential, first) == ["loader-restarted-every-step"]
    assert _restarts(sequential, first, RESTART_STEPS - 1) == []
    # Shuffled without workers: a random batch each step, and no processes to start.
    assert _restarts(shuffled, first) == []
    # Read to its end each step (a step per epoch), or a one-batch loader: no restart.
    assert _restarts(sequential, lambda loader: list(loader)) == []
    one = lambda: DataLoader(TensorDataset(torch.arange(8.0)), batch_size=8)  # noqa: E731
    assert _restarts(one, first) == []
    # One iterator drawn from step after step: the healthy loop.
    it = iter(sequential())
    assert _restarts(sequential, lambda loader: next(it), 8) == []


def test_the_restart_finding_names_what_it_costs() -> None:
    found = slips.loader_restarted_every_step("a DataLoader over X", 20, 64, False, 4)
    assert "4 worker processes start anew" in found.message and "same" not in found.message
    # persistent_workers=True: iter(loader) resets the same workers, it does not start them.
    found = slips.loader_restarted_every_step("a DataLoader over X", 20, 64, False, 4, True)
    assert "start anew" not in found.message and "reset every step" in found.message
    assert found.evidence["persistent_workers"] is True


def test_persistent_workers_reset_each_step_are_not_said_to_start_anew() -> None:
    found: list[Finding] = []
    loaders = Loaders(found.append)
    loaders.install()
    try:
        data = TensorDataset(torch.arange(64.0))
        loader = DataLoader(data, batch_size=8, num_workers=1, persistent_workers=True)
        for _ in range(RESTART_STEPS):
            next(iter(loader))
            loaders.end_step()
    finally:
        loaders.uninstall()
    assert [f.code for f in found] == ["loader-restarted-every-step"]
    assert "persistent worker processes are reset" in found[0].message


def test_a_distributed_sampler_whose_epoch_is_never_set_is_named() -> None:
    def run(set_epoch: bool, shuffle: bool = True, passes_per_epoch: int = 1) -> list[str]:
        found: list[Finding] = []
        loaders = Loaders(found.append)
        loaders.install()
        try:
            data = TensorDataset(torch.arange(16.0))
            sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=shuffle)
            loader = DataLoader(data, batch_size=4, sampler=sampler)
            for epoch in range(4):
                if set_epoch:
                    sampler.set_epoch(epoch)
                for _ in range(passes_per_epoch):
                    list(loader)
        finally:
            loaders.uninstall()
        return [f.code for f in found]

    assert run(set_epoch=False) == ["sampler-epoch-not-set"]
    assert run(set_epoch=True) == []
    assert run(set_epoch=True, passes_per_epoch=2) == []  # a statistics pass, then training
    assert run(set_epoch=False, shuffle=False) == []  # an evaluation loader: no order to vary


def _sorted_findings(
    shuffle: bool, evaluate: bool = False, targets_of=None, batches: int = 40
) -> list[Finding]:
    """Trains on ``batches`` batches of 8 of data sorted by label (20 examples a class),
    a cross-entropy each; with ``evaluate``, under ``no_grad`` and without steps."""
    found: list[Finding] = []
    loaders = Loaders(found.append)
    loaders.install()
    try:
        y = torch.arange(batches * 8) // 20  # classes 0, 0, ..., 1, 1, ...: sorted
        x = torch.randn(len(y), 3)
        for _, labels in DataLoader(TensorDataset(x, y), batch_size=8, shuffle=shuffle):
            with torch.set_grad_enabled(not evaluate):  # the loss wrapper hands it over:
                loaders.note_target(targets_of(labels) if targets_of else labels)
            loaders.end_step()
    finally:
        loaders.uninstall()
    return found


def test_a_loader_that_does_not_shuffle_data_sorted_by_label_is_named() -> None:
    found = _sorted_findings(shuffle=False)
    assert [f.code for f in found] == ["loader-not-shuffled"]
    # One batch of each 5 straddles two classes: 16 of the first 20 hold one class.
    assert found[0].evidence["single_class_batches"] == 16
    assert found[0].evidence["classes"] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert _sorted_findings(shuffle=True) == []
    assert _sorted_findings(shuffle=False, evaluate=True) == []  # an evaluation's losses
    assert _sorted_findings(shuffle=False, targets_of=lambda y: y[:3]) == []  # too few
    assert _sorted_findings(shuffle=False, targets_of=lambda y: y.float()) == []  # soft targets
    mixed = lambda y: y[torch.randperm(len(y))] * 0 + torch.arange(len(y)) % 3  # noqa: E731
    assert _sorted_findings(shuffle=False, targets_of=mixed) == []


def test_a_sorted_loader_of_fewer_batches_than_the_steps_read_is_named_over_its_passes() -> None:
    """10 batches a pass (a small dataset), an evaluation loader's pass after each: the
    training loader's steps are counted on from one of its passes to the next."""

    def run(shuffle: bool) -> list[str]:
        found: list[Finding] = []
        loaders = Loaders(found.append)
        loaders.install()
        try:
            y = torch.arange(80) // 20  # 4 classes, sorted
            train = DataLoader(TensorDataset(torch.randn(80, 3), y), batch_size=8, shuffle=shuffle)
            val = DataLoader(TensorDataset(torch.randn(16, 3), torch.arange(16) // 4), batch_size=8)
            for _epoch in range(3):
                for _, labels in train:
                    loaders.note_target(labels)
                    loaders.end_step()
                with torch.no_grad():
                    for _, labels in val:
                        loaders.note_target(labels)
        finally:
            loaders.uninstall()
        return [f.code for f in found]

    assert run(shuffle=False) == ["loader-not-shuffled"]
    assert run(shuffle=True) == []


def test_targets_are_read_a_bounded_number_of_times_a_pass_without_steps() -> None:
    """Where nothing calls end_step (a Lightning run), the reads stop on their own."""
    loaders = Loaders(lambda found: None)
    loaders.install()
    try:
        data = TensorDataset(torch.arange(64.0), torch.arange(64) // 8)
        for _, labels in DataLoader(data, batch_size=4):  # does not shuffle
            for _ in range(10):
                loaders.note_target(labels)
        assert loaders.reads == 4 * SORTED_STEPS
    finally:
        loaders.uninstall()
