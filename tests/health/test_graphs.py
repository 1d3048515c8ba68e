"""Retained graphs against truncated backpropagation through time (TBPTT).

A recurrent state carried from chunk to chunk of a long sequence keeps its graph on purpose for
a few optimiser steps at most: for none (detached at the end of each chunk), until the next
chunk (detached at its start), or for a window of chunks whose backward runs through all of
them. None of these grows; a state never detached does, and is still ``graph-retained``.
"""

from __future__ import annotations

import contextlib
import io
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from treeqa.health import graphs, run_doctor, sites
from treeqa.health.graphs import holder_name

GRAPH_CODES = ("graph-retained", "loss-accumulated-with-graph", "retain-graph-every-step")

LSTM_LM = """
import torch
from torch import nn

torch.manual_seed(0)
VOCAB, DIM, BATCH, BPTT = 100, 32, 4, 35


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.rnn = nn.{cell}(DIM, DIM)
        self.out = nn.Linear(DIM, VOCAB)

    def forward(self, tokens, hidden):  # tokens: [T, B]
        states, hidden = self.rnn(self.embed(tokens), hidden)  # [T, B, DIM]
        return self.out(states), hidden  # [T, B, VOCAB]


def detach(hidden):
    return hidden.detach() if isinstance(hidden, torch.Tensor) else tuple(h.detach() for h in hidden)


stream = torch.randint(0, VOCAB, (BPTT * 36 + 1, BATCH))  # one long sequence per batch row
model = LanguageModel()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
hidden = None
for i in range(0, stream.size(0) - 1, BPTT):
    x, y = stream[i : i + BPTT], stream[i + 1 : i + 1 + BPTT]
    if "{detach}" == "start" and hidden is not None:
        hidden = detach(hidden)  # the last chunk's graph lived until now
    logits, hidden = model(x, hidden)
    if "{detach}" == "end":
        hidden = detach(hidden)
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    opt.step()
"""

# fo-pooling (QRNN) over frozen embeddings: the state's recurrence saves no parameter, so a
# backward can run through the chunks of earlier optimiser steps (an nn.LSTM's cannot: the
# optimiser has changed the weights its graph saved).
WINDOWED_LM = """
import torch
from torch import nn

torch.manual_seed(0)
VOCAB, DIM, BATCH, BPTT, WINDOW = 100, 32, 4, 10, {window}


class FoPooling(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding.from_pretrained(torch.randn(VOCAB, DIM))
        self.gates = nn.Linear(DIM, 2 * DIM)
        self.out = nn.Linear(DIM, VOCAB)

    def forward(self, tokens, c):  # tokens: [T, B]; c: [B, DIM]
        f, z = self.gates(self.embed(tokens)).chunk(2, dim=-1)  # [T, B, DIM] each
        f, z = torch.sigmoid(f), torch.tanh(z)
        states = []
        for t in range(tokens.size(0)):
            c = f[t] * c + (1 - f[t]) * z[t]
            states.append(c)
        return self.out(torch.stack(states)), c  # [T, B, VOCAB], [B, DIM]


stream = torch.randint(0, VOCAB, (BPTT * 36 + 1, BATCH))
model = FoPooling()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
c = torch.zeros(BATCH, DIM)
for chunk, i in enumerate(range(0, stream.size(0) - 1, BPTT)):
    x, y = stream[i : i + BPTT], stream[i + 1 : i + 1 + BPTT]
    if "{detach}" == "start" and chunk % WINDOW == 0:
        c = c.detach()
    logits, c = model(x, c)
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad()
    loss.backward(retain_graph=True)  # the next chunk's backward runs through this graph
    opt.step()
    if "{detach}" == "end" and chunk % WINDOW == WINDOW - 1:
        c = c.detach()
"""


def doctor(tmp_path: Path, source: str) -> dict[str, Any]:
    script = tmp_path / "lm.py"
    script.write_text(source)
    with contextlib.redirect_stdout(io.StringIO()):
        code, report = run_doctor(["python", str(script)], every=10, stream=io.StringIO())
    assert code == 0 and report["steps"] == 36
    return report


def graph_findings(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["code"]: f for f in report["findings"] if f["code"] in GRAPH_CODES}


@pytest.mark.parametrize(("cell", "detach"), [("LSTM", "end"), ("GRU", "start")])
def test_an_rnn_state_detached_at_each_chunk_is_not_retained(
    cell: str, detach: str, tmp_path: Path
) -> None:
    source = LSTM_LM.replace("{cell}", cell).replace("{detach}", detach)
    assert graph_findings(doctor(tmp_path, source)) == {}


@pytest.mark.parametrize(("window", "detach"), [(4, "start"), (4, "end"), (2, "start")])
def test_a_window_of_chunks_kept_for_the_backward_is_not_retained(
    window: int, detach: str, tmp_path: Path
) -> None:
    """The state keeps its graph for up to ``window`` optimiser steps and each backward runs
    through it: seen before as graph-retained (error) and retain-graph-every-step."""
    source = WINDOWED_LM.replace("{window}", str(window)).replace("{detach}", detach)
    assert graph_findings(doctor(tmp_path, source)) == {}


def test_a_state_never_detached_is_retained_and_named(tmp_path: Path) -> None:
    """Without the detach the graph grows by a chunk each step: graph-retained, an error since
    each backward runs through all of it, held by the script's ``c`` (not by the earlier
    states its graph saves). retain_graph=True is needed here, so that finding is not made."""
    source = WINDOWED_LM.replace("{window}", "4").replace("{detach}", "never")
    found = graph_findings(doctor(tmp_path, source))
    assert list(found) == ["graph-retained"]
    retained = found["graph-retained"]
    assert retained["severity"] == "error" and retained["evidence"]["backward_reaches_old_graphs"]
    assert retained["evidence"]["oldest_step"] == 1
    assert retained["where"].startswith("local variable 'c' in <module>()")


MEMORY_BANK = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
N = 512


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(16, 8)
        self.register_buffer("bank", F.normalize(torch.randn(N, 8), dim=1))

    def forward(self, x):
        return F.normalize(self.net(x), dim=1)


model = Encoder()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.randn(N, 16)
for step in range(36):
    idx = torch.randint(0, N, (32,))
    z = model(data[idx])
    loss = F.cross_entropy(z @ model.bank.detach().t() / 0.1, idx)
    opt.zero_grad()
    loss.backward()
    opt.step()
    model.bank[idx] = F.normalize(0.5 * model.bank[idx] + 0.5 * z, dim=1)  # no no_grad, no detach
"""


def test_a_buffer_updated_with_its_graph_is_named(tmp_path: Path) -> None:
    """A memory bank registered as a buffer and updated in place outside ``no_grad`` keeps every
    step's graph; the tensors that graph saves are held from C++ only, so the holder named is
    the model's buffer, not "unknown holder", with the script's name for it (an EMA copy's
    weights are named through the copy: ``Conv2d.weight (ema.module.0.weight)``)."""
    found = graph_findings(doctor(tmp_path, MEMORY_BANK))
    retained = found["graph-retained"]
    assert retained["where"] == "Encoder.bank (model.bank)", retained["where"]


REPLAY = """
import random

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
random.seed(0)
q = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(q.parameters(), lr=1e-3)
replay = []
for step in range(36 + 15):
    state = torch.randn(8)
    q_values = q(state)  # kept in the transition for logging, with its graph
    replay.append((state, int(q_values.argmax()), random.random(), q_values))
    if len(replay) < 16:
        continue
    batch = random.sample(replay, 16)
    states = torch.stack([t[0] for t in batch])
    actions = torch.tensor([t[1] for t in batch])
    rewards = torch.tensor([t[2] for t in batch])
    loss = F.smooth_l1_loss(q(states).gather(1, actions[:, None]).squeeze(1), rewards)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_replay_buffer_of_transitions_with_graphs_is_named(tmp_path: Path) -> None:
    """Q-values kept with their graphs in the replay buffer's transition tuples: the holder
    named is the buffer (a list of records), not the minibatch sampled from it this step."""
    retained = graph_findings(doctor(tmp_path, REPLAY))
    where = retained["graph-retained"]["where"]
    assert where.startswith("list 'replay' in <module>()"), where


def test_a_global_of_an_imported_module_is_named_as_a_global() -> None:
    """A list in another module's globals (not in any live frame) is named ``global 'name'``,
    not ``module.name`` as though the module's namespace were an object's attributes."""
    helper = types.ModuleType("helper")
    helper.history = [(0, torch.ones(3, requires_grad=True) * 2)]  # held by no local variable
    name = holder_name(helper.history[0][1], set())
    assert name == "global 'history'[][]"


VAL_LOSSES = """
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x_val = torch.randn(64, 8)
val_losses = []
for step in range(36):
    x = torch.randn(16, 8)
    loss = F.cross_entropy(model(x), x[:, :3].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 6 == 5:
        model.eval()
        for i in range(0, len(x_val), 16):
            x = x_val[i : i + 16]
            val_losses.append(F.cross_entropy(model(x), x[:, :3].argmax(1)))  # with graphs
        model.train()
"""


def test_a_list_of_evaluation_losses_names_the_list_for_their_graphs_too(tmp_path: Path) -> None:
    """Evaluation losses kept with their graphs: the activations those graphs keep alive (held
    from C++ only) are the list's finding, not a graph-retained one of "unknown holder"."""
    found = graph_findings(doctor(tmp_path, VAL_LOSSES))
    assert list(found) == ["loss-accumulated-with-graph"]
    accumulated = found["loss-accumulated-with-graph"]
    assert accumulated["where"].startswith("list 'val_losses' in <module>()")
    assert accumulated["evidence"]["tensors_in_their_graphs"] > 0


def test_a_scan_passes_by_views_whose_base_changed_in_place_since() -> None:
    """FullyShardedDataParallel keeps a layer's weights as views (``split``) of a flat parameter
    it fills anew each step: autograd refuses to give such a view's ``grad_fn``, and the scan
    stopped the monitor on them."""
    flat = nn.Parameter(torch.zeros(6))
    weight, bias = flat.split([4, 2])
    with torch.no_grad():
        flat.add_(1.0)
    with pytest.raises(RuntimeError):
        weight.grad_fn  # noqa: B018 (what the scan met)
    floor = graphs.next_sequence_nr()
    kept = [flat * 2 for _ in range(2)]  # graphs of an earlier step, still found
    found = graphs.scan(graphs.next_sequence_nr(), floor=floor)
    assert found.tensors == len(kept)
    assert graphs.sequence_nr(weight) == -1 and graphs.sequence_nr(bias) == -1


def test_a_holders_site_is_the_line_that_gives_it_a_graph(tmp_path: Path) -> None:
    """Not its empty start, nor a line under no_grad: a prioritised replay's
    ``self.prios[i] = self.prios.max()`` under no_grad was named, where ``self.prios[idx] =
    td.abs()`` kept the TD errors' graphs."""
    script = tmp_path / "replay.py"
    script.write_text(
        "class Replay:\n"
        "    def __init__(self):\n"
        "        self.prios = torch.zeros(100)\n"
        "    @torch.no_grad()\n"
        "    def reset(self, i):\n"
        "        self.prios[i] = self.prios.max()\n"
        "    def add(self, i, idx, td):\n"
        "        with torch.no_grad():\n"
        "            self.prios[i] = self.prios.max()\n"
        "        self.prios[idx] = td.abs() + 1e-3\n"
    )
    assert sites.assignment_site([str(script)], "prios", True) == f"{script}:10"
    script.write_text("total = 0\nfor x in xs:\n    total += loss(x)\n")
    assert sites.assignment_site([str(script)], "total") == f"{script}:3"
    # A Lightning module's list of step outputs grows by append: that line, not its start.
    script.write_text("self.outputs = []\nself.outputs.append(loss)\n")
    assert sites.assignment_site([str(script)], "outputs", True) == f"{script}:2"
    # An RNN's state unpacked with its output, which reads it: that line, not another
    # function's local of the same name (a TBPTT loop that never detaches its hidden state).
    script.write_text(
        "def evaluate():\n"
        "    hidden = model.init_hidden(10)\n"
        "hidden = model.init_hidden(20)\n"
        "for x in batches:\n"
        "    out, hidden = model(x, hidden)\n"
        "    f(x, hidden=hidden)\n"
    )
    assert sites.assignment_site([str(script)], "hidden") == f"{script}:5"
    # A model's forward unpacks a variable of the same name first: the holder's own function
    # (a global here) is looked in first.
    script.write_text(
        "def forward(x, hidden):\n"
        "    out, hidden = rnn(x, hidden)\n"
        "    return out, hidden\n"
        "hidden = init_hidden()\n"
        "for x in batches:\n"
        "    out, hidden = forward(x, hidden)\n"
    )
    assert sites.assignment_site([str(script)], "hidden", scope="<module>") == f"{script}:6"
    assert sites.assignment_site([str(script)], "hidden", scope="forward") == f"{script}:2"


SCRIPTS = Path(__file__).parent / "scripts"


@pytest.mark.parametrize(
    "name",
    [
        "clean_gradients_as_data",  # gradients by torch.autograd.grad; forwards no backward took
        "clean_losses_backpropagated",  # a forward that picks the hardest examples, not trained on
    ],
)
def test_a_sampled_steps_graphs_are_let_go_at_its_end_at_the_default_sampling(name: str) -> None:
    """What a sampled step keeps of its forwards (their outputs, their autograd nodes: each
    holds its graph) goes at the step's end, not at the next sampled step's forward, 50 steps
    on: scripts whose forwards no backward takes were named ``graph-retained`` at ``--every 50``
    for what the monitor held (``Overlaps.outputs``, ``Pairing.outputs``)."""
    with contextlib.redirect_stdout(io.StringIO()):
        _, report = run_doctor(
            ["python", str(SCRIPTS / f"{name}.py")], every=50, stream=io.StringIO()
        )
    assert report["steps"] >= 100
    assert [f for f in report["findings"] if f["code"] in GRAPH_CODES] == []
