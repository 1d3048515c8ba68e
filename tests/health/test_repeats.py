"""A model trained on the same batch at every step: one batch drawn above the loop, or a loop
over a loader whose batches never reach the model; and the ways of drawing batches that are
not that."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import torch

from treeqa.health.launch import run_doctor
from treeqa.health.repeats import fingerprint

HEAD = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
features, labels = torch.randn(640, 8), torch.randint(0, 3, (640,))
loader = DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train(x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _doctor(tmp_path: Path, body: str) -> list[dict[str, Any]]:
    script = tmp_path / "script.py"
    script.write_text(HEAD + body)
    with contextlib.redirect_stdout(io.StringIO()):
        _, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    assert not report.get("monitor_failures")
    return [f for f in report["findings"] if f["code"] == "same-batch-every-step"]


def test_one_batch_drawn_above_the_loop_is_named_where_the_model_is_called(
    tmp_path: Path,
) -> None:
    found = _doctor(
        tmp_path,
        "x, y = next(iter(loader))\nfor _step in range(100):\n    train(x, y)\n",
    )
    assert len(found) == 1
    assert found[0]["where"].endswith("script.py:15")  # the forward, in train
    assert "no batch was drawn over them" in found[0]["message"]
    assert "(20 batches)" in found[0]["message"]
    evidence = found[0]["evidence"]
    assert evidence["shape"] == [32, 8] and evidence["batches_drawn_over_them"] == 0


def test_one_batch_drawn_without_gradients_is_named_past_validation_passes(
    tmp_path: Path,
) -> None:
    body = """
validation = DataLoader(TensorDataset(features, labels), batch_size=32)


@torch.no_grad()
def first_batch():
    return next(iter(loader))


x, y = first_batch()
for _step in range(100):
    train(x, y)
    if _step % 25 == 0:
        with torch.no_grad():  # a pass to its end, of the same batch size
            sum(model(v).sum() for v, _ in validation)
"""
    found = _doctor(tmp_path, body)
    assert len(found) == 1 and "(20 batches)" in found[0]["message"]


def test_the_loops_batches_not_given_to_the_model_are_named(tmp_path: Path) -> None:
    body = """
x, y = next(iter(loader))  # looked at for its shape
for _epoch in range(5):
    for xb, yb in loader:
        train(x, y)  # the loop's batches unused
"""
    found = _doctor(tmp_path, body)
    assert len(found) == 1
    assert "gave a new batch at every step" in found[0]["message"]
    assert found[0]["evidence"]["batches_drawn_over_them"] >= 20


def test_batches_drawn_each_step_validation_draws_and_a_changing_batch_are_not_named(
    tmp_path: Path,
) -> None:
    body = """
watch_x, watch_y = next(iter(loader))  # a batch to watch, read without gradients
for _epoch in range(5):
    for x, y in loader:
        train(x, y)
    with torch.no_grad():
        model(watch_x)
        sum(model(x).sum() for x, _ in loader)
x, y = next(iter(loader))
for _step in range(60):  # one batch, new noise each step: its inputs differ
    train(x + 0.1 * torch.randn_like(x), y)
"""
    assert _doctor(tmp_path, body) == []


def test_full_batch_training_and_a_loader_of_one_batch_are_not_named(tmp_path: Path) -> None:
    body = """
x, y = next(iter(loader))  # a shape check; then the whole set as one batch, by design
for _step in range(60):
    train(features, labels)
whole = DataLoader(TensorDataset(features[:32], labels[:32]), batch_size=32)
x, y = next(iter(whole))  # a loader of one batch: that batch is all it has
for _step in range(60):
    train(x, y)
"""
    assert _doctor(tmp_path, body) == []


def test_a_batch_drawn_on_some_steps_only_is_not_named(tmp_path: Path) -> None:
    body = """
batches = iter(loader)
x, y = next(batches)
for _step in range(100):
    if _step % 4 == 0:  # a new batch every 4th step, trained on 4 times
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
    train(x, y)
"""
    assert _doctor(tmp_path, body) == []


def test_a_fixed_input_beside_a_loaders_batch_and_short_loops_on_one_batch_are_not_named(
    tmp_path: Path,
) -> None:
    body = """
grid = torch.randn(32, 8)  # the same 32 points first each step (boundary points), then a batch
for _epoch in range(5):
    for x, y in loader:
        model(grid).pow(2).mean().backward()
        train(x, y)
stats = sum(x.sum(0) for x, _ in loader)  # a pass read to its end, with gradients on
for _step in range(60):  # then a fixed input of the loader's batch size, by design
    train(grid, y)
single = DataLoader(TensorDataset(features, labels), batch_size=1)
x, y = next(iter(single))  # one example, fitted on purpose
for _step in range(60):
    train(x, y)
for _task in range(3):  # 30 steps on one batch a task: an inner loop by design
    x, y = next(iter(loader))
    for _inner in range(30):
        train(x, y)
"""
    assert _doctor(tmp_path, body) == []


def test_fingerprints_tell_batches_apart_one_hot_rows_and_integer_inputs_included() -> None:
    torch.manual_seed(0)
    x = torch.randn(32, 8)
    assert torch.equal(fingerprint(x), fingerprint(x.clone()))
    assert not torch.equal(fingerprint(x), fingerprint(torch.randn(32, 8)))
    tokens = torch.randint(0, 100, (16, 20))
    assert fingerprint(tokens).dtype == torch.float64
    assert not torch.equal(fingerprint(tokens), fingerprint(tokens.flip(0)))
    one_hot = torch.nn.functional.one_hot(torch.randint(0, 5, (64,)), 5)  # every row sums to 1
    other = torch.nn.functional.one_hot(torch.randint(0, 5, (64,)), 5)
    assert not torch.equal(fingerprint(one_hot), fingerprint(other))
