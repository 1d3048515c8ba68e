"""The checks that compare a model's inputs and its losses' targets with the batches the
DataLoaders drew: a model trained on the same batch at every step (one batch drawn above the
loop, or a loop over a loader whose batches never reach the model), inputs and targets from
two loaders drawn apart; and the ways of drawing batches that are neither."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from treeqa.health.passes import provenance, same_values
from treeqa.health.repeats import fingerprint

Doctor = Callable[[str, str], list[dict[str, Any]]]
"""The ``doctor_script`` fixture: a script's text -> its findings of a code."""
APART = "targets-shuffled-apart"
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


def _doctor(
    doctor_script: Doctor,
    body: str,
    code: str = "same-batch-every-step",
) -> list[dict[str, Any]]:
    return doctor_script(HEAD + body, code)


def test_one_batch_drawn_above_the_loop_is_named_where_the_model_is_called(
    doctor_script: Doctor,
) -> None:
    found = _doctor(
        doctor_script,
        "x, y = next(iter(loader))\nfor _step in range(100):\n    train(x, y)\n",
    )
    assert len(found) == 1
    assert found[0]["where"].endswith("script.py:15")  # the forward, in train
    assert "no batch was drawn over them" in found[0]["message"]
    assert "(20 batches)" in found[0]["message"]
    evidence = found[0]["evidence"]
    assert evidence["shape"] == [32, 8] and evidence["batches_drawn_over_them"] == 0


def test_one_batch_drawn_without_gradients_is_named_past_validation_passes(
    doctor_script: Doctor,
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
    found = _doctor(doctor_script, body)
    assert len(found) == 1 and "(20 batches)" in found[0]["message"]


def test_a_batch_given_in_a_tuple_to_a_backbone_then_a_head_is_named(doctor_script: Doctor) -> None:
    body = """
class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 16)

    def forward(self, pair):  # model((x, weights)): a batch in a tuple
        x, weights = pair
        return self.layer(x * weights[:, None])


backbone, head = Backbone(), nn.Linear(16, 3)  # the head given features that train
opt = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.1)
x, y = next(iter(loader))
for _step in range(100):
    loss = F.cross_entropy(head(backbone((x, torch.ones(32)))), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
    found = _doctor(doctor_script, body)
    assert len(found) == 1 and "Backbone was given the same batch [32, 8]" in found[0]["message"]


def test_the_loops_batches_not_given_to_the_model_are_named(doctor_script: Doctor) -> None:
    body = """
x, y = next(iter(loader))  # looked at for its shape
for _epoch in range(5):
    for xb, yb in loader:
        train(x, y)  # the loop's batches unused
"""
    found = _doctor(doctor_script, body)
    assert len(found) == 1
    assert "gave a new batch at every step" in found[0]["message"]
    assert found[0]["evidence"]["batches_drawn_over_them"] >= 20


def test_batches_drawn_each_step_validation_draws_and_a_changing_batch_are_not_named(
    doctor_script: Doctor,
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
    assert _doctor(doctor_script, body) == []


def test_full_batch_training_and_a_loader_of_one_batch_are_not_named(doctor_script: Doctor) -> None:
    body = """
x, y = next(iter(loader))  # a shape check; then the whole set as one batch, by design
for _step in range(60):
    train(features, labels)
whole = DataLoader(TensorDataset(features[:32], labels[:32]), batch_size=32)
x, y = next(iter(whole))  # a loader of one batch: that batch is all it has
for _step in range(60):
    train(x, y)
"""
    assert _doctor(doctor_script, body) == []


def test_a_batch_drawn_on_some_steps_only_is_not_named(doctor_script: Doctor) -> None:
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
    assert _doctor(doctor_script, body) == []


def test_a_fixed_input_beside_a_loaders_batch_and_short_loops_on_one_batch_are_not_named(
    doctor_script: Doctor,
) -> None:
    body = """
grid = torch.randn(32, 8)  # the same 32 points first each step (boundary points), then a batch
grid_labels = torch.randint(0, 3, (32,))
for _epoch in range(5):
    for x, y in loader:
        model(grid).pow(2).mean().backward()
        train(x, y)
stats = sum(x.sum(0) for x, _ in loader)  # a pass read to its end, with gradients on
for _step in range(60):  # then a fixed input of the loader's batch size, by design
    train(grid, grid_labels)
single = DataLoader(TensorDataset(features, labels), batch_size=1)
x, y = next(iter(single))  # one example, fitted on purpose
for _step in range(60):
    train(x, y)
for _task in range(3):  # 30 steps on one batch a task: an inner loop by design
    x, y = next(iter(loader))
    for _inner in range(30):
        train(x, y)
"""
    assert _doctor(doctor_script, body) == []


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


def test_generators_seeded_alike_fall_out_of_step_once_zip_stops_on_one(
    doctor_script: Doctor,
) -> None:
    body = """
xs = DataLoader(features, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(1))
ys = DataLoader(labels, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(1))
for _epoch in range(3):  # the first epoch in step; then xs's sampler drew one more order
    for x, y in zip(xs, ys):
        train(x, y)
"""
    found = _doctor(doctor_script, body, APART)
    assert len(found) == 1 and found[0]["evidence"]["steps"][0] > 20


def test_inputs_and_targets_from_two_shuffling_loaders_are_named_where_the_loss_is_taken(
    doctor_script: Doctor,
) -> None:
    body = """
xs = DataLoader(TensorDataset(features), batch_size=32, shuffle=True)
ys = DataLoader(labels, batch_size=32, shuffle=True)
for _epoch in range(3):
    for (x,), y in zip(xs, ys):
        train(x.double().float(), y.view(-1, 1).squeeze(1))  # copies of the same values
"""
    found = _doctor(doctor_script, body, APART)
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert found[0]["where"].endswith("script.py:15")  # the loss, in train
    assert "(over TensorDataset)" in found[0]["message"]
    assert "(over Tensor)" in found[0]["message"]
    assert found[0]["evidence"]["examples"] == [640, 640]


def test_targets_given_to_a_loss_module_are_read_as_targets(doctor_script: Doctor) -> None:
    body = """
xs = DataLoader(TensorDataset(features), batch_size=32, shuffle=True)
masks = DataLoader((features > 0).float(), batch_size=32, shuffle=True)
segment = nn.Linear(8, 8)
opt = torch.optim.SGD(segment.parameters(), lr=0.1)
for _epoch in range(2):
    for (x,), m in zip(xs, masks):
        loss = nn.BCEWithLogitsLoss()(segment(x), m)  # a module, itself given the masks
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
    assert len(_doctor(doctor_script, body, APART)) == 1


def test_targets_scored_against_no_forward_of_the_other_loaders_batch_are_not_named(
    doctor_script: Doctor,
) -> None:
    body = """
class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.aux = nn.Linear(8, 3), nn.Linear(8, 3)

    def forward(self, x):
        return self.body(x)


net = Two()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
first = DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True)
second = DataLoader(TensorDataset(features * 255, labels), batch_size=32, shuffle=True)
for _epoch in range(3):
    for (x, y), (x2, y2) in zip(first, second):
        loss = F.cross_entropy(net(x), y)  # then a task of its own through a method
        loss = loss + F.cross_entropy(net.aux(x2 / 255), y2)
        prior = net.body.bias.expand(32, 3)  # and a class prior, scored against y2 too
        loss = loss + F.cross_entropy(prior, y2)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
    assert _doctor(doctor_script, body, APART) == []


def test_loaders_kept_in_one_order_and_unpaired_sets_are_not_named(doctor_script: Doctor) -> None:
    body = """
order = torch.randperm(640).tolist()
for sampler in (None, order):  # in order; one shuffled order, shared
    xs = DataLoader(features, batch_size=32, sampler=sampler)
    ys = DataLoader(labels, batch_size=32, sampler=sampler)
    for _epoch in range(2):
        for x, y in zip(xs, ys):
            train(x, y)
both = DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True)
more = DataLoader(torch.randn(960, 8), batch_size=32, shuffle=True)  # another set, unpaired
for _epoch in range(2):
    for (x, y), u in zip(both, more):
        train(x, y)
        model(u).logsumexp(1).mean().backward()
mixed = DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True)
for _epoch in range(2):  # another pass mixed into a batch in place, each its labels
    for (x, y), (x2, y2) in zip(both, mixed):
        loss = 0.5 * F.cross_entropy(model(x.mul_(0.5).add_(0.5 * x2)), y)
        loss = loss + 0.5 * F.cross_entropy(model(x), y2)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
    assert _doctor(doctor_script, body, APART) == []


def test_labels_a_generator_is_given_then_a_critics_targets_are_not_named(
    doctor_script: Doctor,
) -> None:
    body = """
real = DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True)
wanted = DataLoader(labels.clone(), batch_size=32, shuffle=True)  # the classes to draw
generator = nn.Embedding(3, 8)  # a class's features, as a conditional generator draws them
make = torch.optim.SGD(generator.parameters(), lr=0.1)
for _epoch in range(3):
    for (x, y), c in zip(real, wanted):
        fake = generator(c).detach()
        loss = F.cross_entropy(model(x), y) + F.cross_entropy(model(fake), c)
        opt.zero_grad()
        loss.backward()
        opt.step()  # the critic's optimiser steps first: its model is the one watched
        made = F.cross_entropy(model(generator(c)), c)
        make.zero_grad()
        made.backward()
        make.step()
"""
    assert _doctor(doctor_script, body, APART) == []


def test_sums_tell_a_batch_by_its_values_whatever_its_shape_or_type() -> None:
    torch.manual_seed(0)
    y = torch.randint(0, 5, (64,))
    read = provenance(y).tolist()
    assert same_values(read, provenance(y.float().view(8, 8)).tolist())
    assert same_values(read, provenance(y[:, None]).tolist())
    assert not same_values(read, provenance(y[torch.randperm(64)][:63]).tolist())
    x = torch.randn(64, 4, dtype=torch.float64)
    assert same_values(provenance(x).tolist(), provenance(x.float()).tolist())
    assert not same_values(provenance(x).tolist(), provenance(torch.randn(64, 4)).tolist())
