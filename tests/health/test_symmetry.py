"""``units-identical``: a layer whose units stay copies of one another, because it and the
layers after it were initialised to one value."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health.findings import Finding
from treeqa.health.symmetry import FROM, IdenticalUnits


def _train(
    model: nn.Module,
    forward: Callable[[torch.Tensor], torch.Tensor],
    lr: float = 1e-2,
    steps: int = 2 * FROM,
) -> list[Finding]:
    """``steps`` Adam steps on a 3-class problem, read as the clock's sampled steps every
    ``FROM``-th; the findings."""
    torch.manual_seed(1)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    opt = torch.optim.Adam(model.parameters(), lr)
    found: list[Finding] = []
    check = IdenticalUnits(found.append)
    for step in range(1, steps + 1):
        loss = F.cross_entropy(forward(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % FROM == 0:
            check.note(step, opt, list(model.named_parameters()))
    return found


def _mlp(init: Callable[[torch.Tensor], object] | None) -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 3))
    for m in model:
        if isinstance(m, nn.Linear) and init is not None:
            init(m.weight)
            nn.init.zeros_(m.bias)
    return model


def test_hidden_layers_initialised_to_one_value_are_named() -> None:
    model = _mlp(lambda w: nn.init.constant_(w, 0.1))
    found = _train(model, model)
    assert [f.code for f in found] == ["units-identical"]
    assert found[0].evidence["parameters"] == ["0.weight", "2.weight"]  # not the output layer
    assert found[0].evidence["step"] == 2 * FROM
    assert found[0].where == "0.weight"
    rows = model[0].weight.detach()
    # still copies after 20 steps, but for rounding (rows summed in another order)
    assert float((rows - rows[:1]).abs().max()) < 1e-6 * float(rows.abs().max())


def test_random_and_zero_initialised_output_layers_are_not() -> None:
    """A random init parts the units at once; a zero-initialised output layer (or one hidden
    layer before a random one) gets a different gradient in each row and parts them at the
    first step."""
    assert _train(_mlp(None), _mlp(None)) == []
    model = _mlp(None)
    nn.init.zeros_(model[4].weight)
    assert _train(model, model) == []
    model = _mlp(None)
    nn.init.constant_(model[0].weight, 0.1)
    assert _train(model, model) == []


def test_weights_that_do_not_train_are_not() -> None:
    """Identical rows that neither move nor have a gradient: a frozen averaging layer, a
    learning rate of 0."""
    model = _mlp(lambda w: nn.init.constant_(w, 0.1))
    assert _train(model, model, lr=0.0) == []
    model = _mlp(None)
    average = nn.Linear(6, 4, bias=False)
    nn.init.constant_(average.weight, 0.25)
    average.requires_grad_(False)
    both = nn.ModuleDict({"average": average, "head": nn.Linear(4, 3)})
    assert _train(both, lambda x: both["head"](both["average"](x))) == []


def test_an_lstm_initialised_to_one_value_is_read_gate_by_gate() -> None:
    """Its gates part (each has its own role) while the units within each stay copies."""
    torch.manual_seed(0)
    lstm, head = nn.LSTM(6, 8, batch_first=True), nn.Linear(8, 3)
    for name, p in lstm.named_parameters():
        nn.init.constant_(p, 0.1 if "weight" in name else 0.0)
    nn.init.constant_(head.weight, 0.1)
    both = nn.ModuleDict({"lstm": lstm, "head": head})

    def forward(x: torch.Tensor) -> torch.Tensor:
        out, _ = both["lstm"](x.view(64, 2, 3).repeat(1, 1, 2))
        return both["head"](out[:, -1])

    found = _train(both, forward)
    assert [f.code for f in found] == ["units-identical"]
    said = found[0].evidence["parameters"]
    assert "lstm.weight_ih_l0 (within each of its 4 blocks)" in said
    assert (
        found[0].evidence["blocks"][said.index("lstm.weight_ih_l0 (within each of its 4 blocks)")]
        == 4
    )
    gates = lstm.weight_ih_l0.detach().view(4, 8, -1)
    assert not torch.equal(gates[0, 0], gates[2, 0])  # gates parted


def test_every_layer_initialised_to_zero_below_relu_is_named_as_never_training() -> None:
    """Weights and biases all 0 below ReLU: every unit outputs 0 and no weight gets a gradient
    (the output layer's bias alone trains); not a single zero layer beside trained ones."""
    model = _mlp(nn.init.zeros_)
    model[1], model[3] = nn.ReLU(), nn.ReLU()
    found = _train(model, model)
    assert [f.code for f in found] == ["units-identical"]
    assert found[0].evidence["all_zero"] == ["0.weight", "2.weight", "4.weight"]
    assert found[0].evidence["parameters"] == []
    assert "never train" in found[0].message
    model = _mlp(None)
    nn.init.zeros_(model[2].weight)
    nn.init.zeros_(model[2].bias)
    model[3] = nn.ReLU()
    assert _train(model, model) == []  # (its next layer gets 0s in, and trains its bias alone)


def test_rows_a_small_learning_rate_barely_moves_from_one_value_are_not() -> None:
    """An output layer at one value under a warm-up's tiny rate: its rows stay within 1e-3 of
    one another for a while, but each moves by its own gradient, not in step."""
    torch.manual_seed(0)
    head = nn.Linear(6, 3)
    nn.init.constant_(head.weight, 2.0)
    assert _train(head, head, lr=1e-6) == []


def test_heads_weighted_zero_beside_a_model_that_trains_are_not_dead() -> None:
    """Two auxiliary heads at 0 whose loss is weighted 0 for a warm-up: all 0 with no gradient,
    while the rest of the model's weights have theirs."""
    model = _mlp(None)
    heads = nn.ModuleList([nn.Linear(8, 4), nn.Linear(8, 4)])
    for head in heads:
        nn.init.zeros_(head.weight)
    both = nn.ModuleDict({"model": model, "heads": heads})

    def forward(x: torch.Tensor) -> torch.Tensor:
        hidden = model[:4](x)
        aux = sum(head(hidden).sum() for head in heads)
        return model[4](hidden) + 0.0 * aux

    assert _train(both, forward) == []
