"""``rnn-state-carried-over``: a recurrent layer's state carried from batch to batch over a
shuffled loader; and the states that are carried on purpose (a stream read in order, the
chunks of one step, a decoder's own state) or made afresh."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from treeqa.health.carried_states import _same

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "rnn-state-carried-over"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randint(0, 20, (800, 8))
y = (x[:, 0] > 9).long()
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=SHUFFLE, drop_last=True)
embed, rnn, head = nn.Embedding(20, 16), nn.LAYER(16, 32, batch_first=True), nn.Linear(32, 2)
params = [*embed.parameters(), *rnn.parameters(), *head.parameters()]
opt = torch.optim.Adam(params, 1e-3)
h = INIT
for epoch in range(2):
    for xb, yb in loader:
        h = CARRY
        out, h = rnn(embed(xb), h)
        loss = F.cross_entropy(head(out[:, -1]), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    EVALUATE
"""
LSTM = {"LAYER": "LSTM", "INIT": "(torch.zeros(1, 32, 32), torch.zeros(1, 32, 32))"}
GRU = {"LAYER": "GRU", "INIT": "torch.zeros(1, 32, 32)"}


def _script(
    carry: str, shuffle: str = "True", layer: dict[str, str] = LSTM, evaluate: str = ""
) -> str:
    text = SCRIPT.replace("CARRY", carry).replace("SHUFFLE", shuffle).replace("EVALUATE", evaluate)
    for key, value in layer.items():
        text = text.replace(key, value)
    return text


@pytest.mark.parametrize(
    ("carry", "layer"),
    [
        ("tuple(e.data for e in h)", LSTM),  # the tutorial's
        ("tuple(e.detach() for e in h)", LSTM),
        ("h.detach()", GRU),
        ("h.detach().clone()", GRU),  # a copy: the same values
    ],
)
def test_a_state_carried_over_shuffled_batches_is_named(
    doctor: Doctor, carry: str, layer: dict[str, str]
) -> None:
    script = _script(carry, layer=layer)
    found = doctor(script, CODE)
    assert len(found) == 1 and found[0]["severity"] == "warning"
    line = script.splitlines().index("        out, h = rnn(embed(xb), h)") + 1
    assert found[0]["where"].endswith(f":{line}")


EVALUATION = """with torch.no_grad():
        for xb, yb in DataLoader(TensorDataset(x[:320], y[:320]), batch_size=32, shuffle=ORDER):
            out, h = rnn(embed(xb), HIDDEN)"""


def test_an_evaluation_that_carries_the_state_is_named(doctor: Doctor) -> None:
    """Trained from zeros each batch, evaluated from the state of the batch before (the first
    from the last training batch's) over batches drawn at random; read in order, the batches
    may be a stream's chunks, and are not judged."""
    afresh = "(torch.zeros(1, 32, 32), torch.zeros(1, 32, 32))"
    carried = EVALUATION.replace("HIDDEN", "h")
    found = doctor(_script(afresh, evaluate=carried.replace("ORDER", "True")), CODE)
    assert len(found) == 1 and found[0]["evidence"]["in"] == "evaluation"
    assert not doctor(_script(afresh, evaluate=carried.replace("ORDER", "False")), CODE)
    afresh_too = EVALUATION.replace("HIDDEN", "None").replace("ORDER", "True")
    assert not doctor(_script(afresh, evaluate=afresh_too), CODE)


def test_a_state_zeroed_in_place_each_batch_is_not_named(doctor: Doctor) -> None:
    zeroed = "tuple(e.detach().zero_() for e in h)"  # the same memory, holding zeros
    assert not doctor(_script(zeroed), CODE)


def test_a_state_carried_over_a_stream_read_in_order_is_not_named(doctor: Doctor) -> None:
    assert not doctor(_script("tuple(e.detach() for e in h)", shuffle="False"), CODE)


def test_a_state_made_afresh_each_batch_is_not_named(doctor: Doctor) -> None:
    afresh = "(torch.zeros(1, 32, 32), torch.zeros(1, 32, 32))"
    assert not doctor(_script(afresh), CODE)
    assert not doctor(_script("None"), CODE)


WITHIN_STEP = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(640, 24, 4)
y = x.sum((1, 2))
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
encoder, decoder = nn.GRU(4, 16, batch_first=True), nn.GRUCell(4, 16)
head = nn.Linear(16, 1)
params = [*encoder.parameters(), *decoder.parameters(), *head.parameters()]
opt = torch.optim.Adam(params, 1e-3)
for epoch in range(2):
    for xb, yb in loader:
        h = None
        for chunk in xb.split(8, dim=1):  # one sequence in chunks, its state carried on
            _, h = encoder(chunk, h)
        s = h[0]
        for t in range(4):  # a decoder fed its own state
            s = decoder(xb[:, t], s)
        loss = F.mse_loss(head(s).squeeze(1), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_states_handed_on_within_a_step_are_not_named(doctor: Doctor) -> None:
    assert not doctor(WITHIN_STEP, CODE)


def test_a_state_is_the_same_by_its_memory_or_its_values() -> None:
    held = torch.randn(1, 4, 8)
    assert _same(held.detach(), held) and _same(held.data, held)
    assert _same(held.clone(), held)  # a copy on the CPU, by its values
    assert not _same(torch.zeros(1, 4, 8), held)
    assert not _same(held.detach().zero_(), held)  # zeroed in place: nothing carried
    assert not _same(held[:, :2], held)  # another shape


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script
