"""``position-signal-by-batch``: a table of position signals added along the batch's dim."""

from __future__ import annotations

import math

import torch
from torch import nn

from treeqa.health.findings import Finding
from treeqa.health.positions import STEPS, PositionTables

B, T, D = 6, 5, 8


class Tutorial(nn.Module):
    """The transformer tutorial's encoding: a [max_len, 1, D] buffer, ``pe[:x.size(0)]``;
    ``how`` says what else it does."""

    def __init__(self, how: str = "", p: float = 0.1):
        super().__init__()
        self.how = how
        self.dropout = nn.Dropout(p)
        position = torch.arange(32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
        pe = torch.zeros(32, 1, D)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "transposed":  # batch-first input, the table laid along dim 1
            return self.dropout(x + self.pe[: x.size(1)].transpose(0, 1))
        if self.how == "scaled":
            return self.dropout(x * math.sqrt(D) + self.pe[: x.size(0)])
        return self.dropout(x + self.pe[: x.size(0)])


def _codes(
    module: nn.Module,
    shape: tuple[int, int, int],
    batch_first: bool | None,
    batch_size: int | None = None,
    steps: int = STEPS,
) -> list[str]:
    """``steps`` sampled steps of ``module`` on inputs of ``shape``, in a model whose attention
    is ``batch_first`` (None: no attention layer), beside a DataLoader of ``batch_size``."""
    torch.manual_seed(0)
    found: list[Finding] = []
    check = PositionTables(found.append)
    modules = [module]
    if batch_first is not None:
        modules.append(nn.MultiheadAttention(D, 2, batch_first=batch_first))
    check.watch(modules)
    module.register_forward_hook(lambda m, args, out: check.note("position", m, args, out))
    for _ in range(steps):
        check.begin_step()
        module(torch.randn(shape))
        check.judge(batch_size)
    return [f.code for f in found]


def test_the_tutorials_table_given_batch_first_input_is_named() -> None:
    assert _codes(Tutorial(), (B, T, D), batch_first=True) == ["position-signal-by-batch"]
    assert _codes(Tutorial(), (B, T, D), True, steps=STEPS - 1) == []
    assert _codes(Tutorial("scaled"), (B, T, D), True) == ["position-signal-by-batch"]
    assert _codes(Tutorial(p=0.0), (B, T, D), True) == ["position-signal-by-batch"]
    # no attention layer to tell: the DataLoader's batch size is dim 0's
    assert _codes(Tutorial(), (B, T, D), None, batch_size=B) == ["position-signal-by-batch"]


def test_tables_laid_along_the_positions_are_not() -> None:
    assert _codes(Tutorial(), (T, B, D), batch_first=False) == []  # as the tutorial runs it
    assert _codes(Tutorial("transposed"), (B, T, D), batch_first=True) == []
    assert _codes(Tutorial(), (T, B, D), None, batch_size=B) == []
    assert _codes(Tutorial(), (B, T, D), None) == []  # which dim is the batch's: unknown
    assert _codes(Tutorial(), (B, 1, D), True) == []  # one position: nothing to tell apart


def test_a_table_whose_rows_are_not_what_was_added_is_not_read() -> None:
    class Gathered(Tutorial):  # rows picked by an id per sequence, not the first B
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.pe[torch.arange(1, x.size(0) + 1)]

    assert _codes(Gathered(), (B, T, D), batch_first=True) == []
