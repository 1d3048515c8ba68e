"""``bidirectional-last-step``: a bidirectional RNN read at its last time step alone; and the
readouts of both directions, pooling, tagging, ``h_n`` and one-way RNNs."""

from __future__ import annotations

import contextlib
import gc
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from treeqa.health import run_doctor
from treeqa.health.rnn_readouts import RnnReadouts

Doctor = Callable[[str, str], list[dict[str, Any]]]
CODE = "bidirectional-last-step"
SCRIPT = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 16)
        self.rnn = nn.RNN_CLASS(16, 12, batch_first=FIRST, bidirectional=BI, num_layers=LAYERS)
        self.head = nn.Linear(WIDTH, 2)

    def forward(self, x, lengths):
        e = self.embed(x if FIRST else x.t())
        out, state = self.rnn(e)
        h = state[0] if isinstance(state, tuple) else state
        return self.head(READOUT)


model = Model()
opt = torch.optim.Adam(model.parameters(), 1e-3)
for step in range(30):
    x = torch.randint(0, 10, (8, 20))
    lengths = torch.randint(5, 21, (8,))
    lengths[0] = 20
    loss = F.cross_entropy(model(x, lengths), (x[:, 0] > 4).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def script_text(
    readout: str, rnn: str = "LSTM", first: bool = True, bi: bool = True, layers: int = 1
) -> str:
    width = 24 if bi and "h[-1]" not in readout else 12
    return (
        SCRIPT.replace("RNN_CLASS", rnn)
        .replace("FIRST", str(first))
        .replace("BI", str(bi))
        .replace("LAYERS", str(layers))
        .replace("WIDTH", str(width))
        .replace("READOUT", readout)
    )


@pytest.mark.parametrize(
    ("readout", "rnn", "first", "layers"),
    [
        ("out[:, -1, :]", "LSTM", True, 1),
        ("out[:, -1]", "GRU", True, 2),  # the last layer's output
        ("out[-1]", "GRU", False, 1),  # time first
        ("torch.relu(out)[:, -1]", "RNN", True, 1),
    ],
)
def test_a_bidirectional_rnn_read_at_its_last_step_is_named(
    doctor: Doctor, readout: str, rnn: str, first: bool, layers: int
) -> None:
    found = doctor(script_text(readout, rnn, first, layers=layers), CODE)
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert found[0]["where"] == f"rnn ({rnn})" and found[0]["evidence"]["time_steps"] == 20


@pytest.mark.parametrize(
    "readout",
    [
        "out[:, -1]",  # the last padded step: the longest rows' last
        "out[torch.arange(len(lengths)), lengths - 1]",  # each row's last real step
    ],
)
def test_the_last_step_of_a_packed_batch_is_named(doctor: Doctor, readout: str) -> None:
    text = script_text(readout).replace(
        "        out, state = self.rnn(e)\n",
        "        packed = pack_padded_sequence(e, lengths, batch_first=True, enforce_sorted=False)\n"
        "        out, state = self.rnn(packed)\n"
        "        out, _ = pad_packed_sequence(out, batch_first=True)\n",
    )
    found = doctor(text, CODE)
    assert len(found) == 1 and found[0]["evidence"]["time_steps"] == 20


@pytest.mark.parametrize(
    ("readout", "bi"),
    [
        ("torch.cat([h[-2], h[-1]], dim=1)", True),  # both directions' final states
        ("torch.cat([out[:, -1, :12], out[:, 0, 12:]], dim=1)", True),
        ("out.mean(dim=1)", True),  # pooled over the steps
        ("out.max(dim=1).values", True),
        ("h[-1]", True),  # the backward direction's final state: the whole sequence read
        ("out[:, -1]", False),  # one way: its last step has read everything
    ],
)
def test_readouts_of_both_directions_or_one_way_rnns_are_not_named(
    doctor: Doctor, readout: str, bi: bool
) -> None:
    assert not doctor(script_text(readout, bi=bi), CODE)


def test_a_tagger_reading_every_step_is_not_named(doctor: Doctor) -> None:
    text = script_text("out").replace(
        "loss = F.cross_entropy(model(x, lengths), (x[:, 0] > 4).long())",
        "loss = F.cross_entropy(model(x, lengths).transpose(1, 2), (x > 4).long())",
    )
    assert not doctor(text, CODE)


def test_the_hooks_keep_nothing_of_the_run_alive(tmp_path: Path) -> None:
    """A hook holding the readouts (and through them the monitor, its models, their classes
    and the script's globals) from a graph the script kept (its last ``loss``) made a cycle
    through autograd that the collector cannot free: the next run in the process read that
    script's losses as its own retained graphs."""
    script = tmp_path / "script.py"
    kept = script_text("out[:, -1, :]").replace(
        "    opt.step()\n", "    opt.step()\n    kept.append(loss)\n"
    )
    script.write_text("kept = []\n" + kept)
    with contextlib.redirect_stdout(io.StringIO()):
        run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, RnnReadouts)]


@pytest.fixture
def doctor(doctor_script: Doctor) -> Doctor:
    return doctor_script
