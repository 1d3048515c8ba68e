"""A model whose output is the same for every row of the batch, and the layer where its rows
stop differing, read from sampled steps' forwards."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health.collapse import SPAN, STEPS, ConstantOutputs
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
    assert "given all zeros for every row after encode" in found[0].message


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
