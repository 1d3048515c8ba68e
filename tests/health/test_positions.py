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
    transposed: bool = False,
    drawing: bool = True,
    dtype: torch.dtype = torch.float32,
) -> list[str]:
    """``steps`` sampled steps of ``module`` on inputs of ``shape``, its output given to an
    attention layer that is ``batch_first`` (None: none; ``transposed``: after a transpose),
    a DataLoader of ``batch_size`` drawing a batch each step (or none, unless ``drawing``)."""
    torch.manual_seed(0)
    found: list[Finding] = []
    check = PositionTables(found.append)
    attention = nn.MultiheadAttention(D, 2, batch_first=bool(batch_first), dtype=dtype)
    for layer in (module, attention):
        layer.register_forward_pre_hook(check.before)
        layer.register_forward_hook(lambda m, args, out: check.note("layer", m, args, out))
    for step in range(steps):
        check.begin_step()
        h = module(torch.randn(shape, dtype=dtype))
        h = h[0] if isinstance(h, tuple) else h
        if batch_first is not None:
            h = h.transpose(0, 1) if transposed else h
            attention(h, h, h)
        check.judge(batch_size, (0, step if drawing else 0))
    return [f.code for f in found]


def test_the_tutorials_table_given_batch_first_input_is_named() -> None:
    assert _codes(Tutorial(), (B, T, D), batch_first=True) == ["position-signal-by-batch"]
    assert _codes(Tutorial(), (B, T, D), True, steps=STEPS - 1) == []
    assert _codes(Tutorial("scaled"), (B, T, D), True) == ["position-signal-by-batch"]
    assert _codes(Tutorial(p=0.0), (B, T, D), True) == ["position-signal-by-batch"]
    # no attention layer to tell: the DataLoader's batch size is dim 0's
    assert _codes(Tutorial(), (B, T, D), None, batch_size=B) == ["position-signal-by-batch"]
    # (a loader that drew no batch for these steps, a validation loader, tells nothing)
    assert _codes(Tutorial(), (B, T, D), None, batch_size=B, drawing=False) == []


def test_tables_laid_along_the_positions_are_not() -> None:
    assert _codes(Tutorial(), (T, B, D), batch_first=False) == []  # as the tutorial runs it
    assert _codes(Tutorial("transposed"), (B, T, D), batch_first=True) == []
    assert _codes(Tutorial(), (T, B, D), None, batch_size=B) == []
    assert _codes(Tutorial(), (B, T, D), None) == []  # which dim is the batch's: unknown
    # batch-first input made time first for the attention, by a transpose after the table
    assert _codes(Tutorial(), (T, B, D), batch_first=True, transposed=True) == []
    assert _codes(Tutorial(), (B, 1, D), True) == []  # one position: nothing to tell apart


def test_a_table_whose_rows_are_not_what_was_added_is_not_read() -> None:
    class Gathered(Tutorial):  # rows picked by an id per sequence, not the first B
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.pe[torch.arange(1, x.size(0) + 1)]

    assert _codes(Gathered(), (B, T, D), batch_first=True) == []


def test_tables_of_the_batchs_rows_or_of_rows_all_alike_are_not_judged() -> None:
    class Offsets(nn.Module):  # a learned offset for each of the B series, the batch's rows
        def __init__(self):
            super().__init__()
            self.offset = nn.Parameter(torch.randn(B, 1, D))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.offset

    assert _codes(Offsets(), (B, T, D), batch_first=True) == []
    silent = Tutorial(p=0.0)  # no position signal at all: a table of zeros
    silent.pe.zero_()
    assert _codes(silent, (B, T, D), batch_first=True) == []


class _Variant(nn.Module):
    """The tutorial's error written other ways: a 2-dim table, kept as a plain attribute,
    scaled by a learned factor, dropped out by F.dropout, returned in a tuple, added in place."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.alpha = nn.Parameter(torch.tensor(0.7))
        table = Tutorial().pe
        if how == "2-dim":
            self.register_buffer("pe", table[:, 0])  # [max_len, D]
        elif how == "attribute":
            self.pe = table  # not registered
        else:
            self.register_buffer("pe", table)

    def forward(self, x: torch.Tensor):
        pe = self.pe[: x.size(0)]
        if self.how == "2-dim":
            return x + pe.unsqueeze(1)
        if self.how == "scaled":
            return x + self.alpha * pe
        if self.how == "functional dropout":
            return torch.nn.functional.dropout(x + pe, 0.1, self.training)
        if self.how == "tuple":
            return x + pe, pe
        if self.how == "in place":
            x += pe
            return x
        return x + pe


def test_tables_added_other_ways_are_read() -> None:
    for how in ("2-dim", "attribute", "scaled", "functional dropout", "tuple", "in place"):
        assert _codes(_Variant(how), (B, T, D), batch_first=True) == ["position-signal-by-batch"], (
            how
        )
    model = Tutorial().to(torch.bfloat16)  # its sums rounded to bfloat16
    assert _codes(model, (B, T, D), True, dtype=torch.bfloat16) == ["position-signal-by-batch"]


def test_as_many_sequences_as_positions_are_read_by_the_attention_given_them() -> None:
    assert _codes(Tutorial(), (T, T, D), batch_first=True) == ["position-signal-by-batch"]
    assert _codes(Tutorial(), (T, T, D), batch_first=False) == []
    assert _codes(Tutorial(), (T, T, D), None, batch_size=T) == []  # a loader cannot tell


def test_a_fixed_table_as_long_as_the_batch_is_judged_a_learned_one_is_not() -> None:
    short = Tutorial()
    short.pe = short.pe[:B].clone()  # a buffer of exactly B rows: max_len = the batch size
    assert _codes(short, (B, T, D), batch_first=True) == ["position-signal-by-batch"]


def test_the_layout_told_by_the_dataloader_alone_makes_a_warning() -> None:
    found: list[Finding] = []
    check = PositionTables(found.append)
    module = Tutorial()
    module.register_forward_hook(lambda m, args, out: check.note("position", m, args, out))
    for step in range(STEPS):
        check.begin_step()
        module(torch.randn(B, T, D))
        check.judge(B, (0, step))
    assert [(f.code, f.severity) for f in found] == [("position-signal-by-batch", "warning")]
    assert found[0].evidence["batch_dim_from"] == "DataLoader"
    # an attention layer given the same dims tells it for sure: an error
    assert _codes(Tutorial(), (B, T, D), batch_first=True) == ["position-signal-by-batch"]
