"""A model whose output is the same for every row of the batch, and the layer where its rows
stop differing, read from sampled steps' forwards."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health.collapse import SPAN, STEPS, ConstantOutputs, spread
from treeqa.health.findings import Finding


def _run(model: nn.Module, batches: list[torch.Tensor], every: int = 10) -> list[Finding]:
    """The check over one sampled step per batch (steps every, 2 * every, ...), its notes
    taken from a forward hook on every layer, as the monitor's."""
    found: list[Finding] = []
    check = ConstantOutputs(found.append, lambda: [model])
    names = {id(m): n or type(model).__name__ for n, m in model.named_modules()}
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: check.note(names[id(m)], m, i, o) if id(m) in names else None
    )
    try:
        for k, x in enumerate(batches, 1):
            check.begin_step()
            model(x)
            check.judge(k * every)
    finally:
        handle.remove()
    return found


def test_dead_relus_are_named_with_the_layer_where_the_rows_stop_differing() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3)
    )
    nn.init.constant_(model[2].bias, -100.0)
    found = _run(model, [torch.randn(32, 8) for _ in range(STEPS)])
    assert [f.code for f in found] == ["outputs-constant"]
    assert found[0].where == "3" and found[0].evidence["output"] == [32, 3]
    assert "layer 3 (ReLU)" in found[0].message and "died" in found[0].message
    assert found[0].evidence["steps"] == [10, 20, 30]


def test_a_relu_called_as_a_function_is_placed_between_layers() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encode, self.head = nn.Linear(8, 16), nn.Linear(16, 3)
            nn.init.constant_(self.encode.bias, -100.0)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.encode(x)
            return self.head(F.relu(h)), h  # a tuple: the first floating output is read

    found = _run(Net(), [torch.randn(32, 8) for _ in range(STEPS)])
    assert [f.where for f in found] == ["head"]
    assert "given all zeros for every row, after encode," in found[0].message


def test_saturated_sigmoids_are_said_so() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Sigmoid(), nn.Linear(8, 2))
    found = _run(model, [torch.rand(16, 4) * 100 + 1e6 for _ in range(STEPS)])
    assert [f.where for f in found] == ["1"] and "saturated" in found[0].message


def test_outputs_that_differ_or_inputs_that_do_not_are_not_named() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    assert _run(model, [torch.randn(32, 8) for _ in range(2 * STEPS)]) == []
    one = torch.randn(1, 8).expand(32, 8)  # one example repeated: the same output is right
    nn.init.constant_(model[0].bias, -100.0)
    assert _run(model, [one] * (2 * STEPS)) == []


def test_a_last_layer_initialised_to_zero_is_not_named_for_the_first_steps() -> None:
    """The first three steps are all sampled: an output of zeros there, moved by the
    optimiser once a warm-up lets it, is no finding (``SPAN``)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    nn.init.zeros_(model[2].weight)
    nn.init.zeros_(model[2].bias)
    assert SPAN > 2
    assert _run(model, [torch.randn(32, 8) for _ in range(STEPS)], every=1) == []
    found = _run(model, [torch.randn(32, 8) for _ in range(STEPS)])  # zero all along
    assert [f.where for f in found] == ["2"] and "weights are all zero" in found[0].message


def test_an_evaluation_is_not_read() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    nn.init.constant_(model[0].bias, -100.0)
    with torch.no_grad():
        assert _run(model, [torch.randn(32, 8) for _ in range(STEPS)]) == []


def test_outputs_the_same_by_design_are_not_named() -> None:
    """A prior broadcast to the rows before the logits, utterance logits repeated over the
    frames of time-first input, a regression whose bias holds targets of 2e5."""

    class Prior(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.prior, self.head = nn.Parameter(torch.zeros(3)), nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.prior.expand(len(x), 3), self.head(x)

    class Utterances(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(8, 3)

        def forward(self, frames: torch.Tensor) -> torch.Tensor:  # [T, B, F] -> [T, B, C]
            return self.head(frames.mean(0)).repeat(len(frames), 1, 1)

    torch.manual_seed(0)
    assert _run(Prior(), [torch.randn(32, 8) for _ in range(STEPS)]) == []
    assert _run(Utterances(), [torch.randn(20, 32, 8) for _ in range(STEPS)]) == []
    prices = nn.Linear(8, 1)
    nn.init.constant_(prices.bias, 2e5)
    assert _run(prices, [torch.randn(32, 8) for _ in range(STEPS)]) == []


def test_a_step_whose_every_gradient_is_zero_is_not_judged() -> None:
    """A policy's head at zero before its first reward trains nothing yet."""
    found: list[Finding] = []
    model = nn.Linear(8, 3)
    nn.init.zeros_(model.weight)
    nn.init.zeros_(model.bias)
    check = ConstantOutputs(found.append, lambda: [model])
    for step in range(10, 10 * (STEPS + 2), 10):
        check.begin_step()
        check.note("Linear", model, (torch.randn(32, 8),), model(torch.randn(32, 8)))
        check.judge(step, still=True)
    assert found == []


def test_every_input_of_the_batch_is_read_and_each_column_on_its_own_scale() -> None:
    """A diffusion model given one time for the whole batch, then noisy rows that differ, is
    judged; a layer whose few huge channels sit beside small ones that differ still differs."""

    class Denoiser(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.time = nn.Linear(1, 4)  # given the same time in every row, by design
            self.net = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 8))
            nn.init.constant_(self.net[0].bias, -100.0)

        def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return self.net(torch.cat([x, self.time(t[:, None])], 1))

    found: list[Finding] = []
    model = Denoiser()
    check = ConstantOutputs(found.append, lambda: [model])
    names = {id(m): n or "Denoiser" for n, m in model.named_modules()}
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: check.note(names[id(m)], m, i, o) if id(m) in names else None
    )
    try:
        for step in range(10, 10 * (STEPS + 1), 10):
            check.begin_step()
            model(torch.full((32,), 0.5), torch.randn(32, 8))
            check.judge(step)
    finally:
        handle.remove()
    assert [f.where for f in found] == ["net.1"]
    wide = torch.cat([torch.full((32, 2), 1e11), torch.randn(32, 6)], 1)
    assert spread(wide).tolist()[0] > 0.1


def test_a_sparse_input_is_passed_over() -> None:
    """A graph network given its adjacency as a sparse tensor: its rows are not compared (the
    monitor failed on it: no as_strided for sparse tensors)."""

    class Graph(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(8, 3)

        def forward(self, adjacency: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return torch.sparse.mm(adjacency, self.layer(x))

    torch.manual_seed(0)
    adjacency = torch.eye(32).to_sparse()
    found: list[Finding] = []
    model = Graph()
    check = ConstantOutputs(found.append, lambda: [model])
    for step in range(10, 10 * (STEPS + 1), 10):
        check.begin_step()
        x = torch.randn(32, 8)
        check.note("Graph", model, (adjacency, x), model(adjacency, x))
        check.judge(step)
    assert found == []
