"""``packed-lengths-mismatch``: lengths given to ``pack_padded_sequence`` read against where
each row's padding starts in the padded batch."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn.utils import rnn
from torch.nn.utils.rnn import pad_sequence

from treeqa.health.findings import Finding
from treeqa.health.packing import CALLS, PackedLengths, padding_ids_start, padding_starts


def _embedded(lengths: list[int], features: int = 6) -> torch.Tensor:
    """[B, T, F] rows of random vectors, padded with zeros past each row's length."""
    return pad_sequence([torch.randn(k, features) for k in lengths], batch_first=True)


def test_padding_starts_where_each_row_ends() -> None:
    lengths = [7, 3, 5, 2]
    assert padding_starts(_embedded(lengths), True).tolist() == [-1, 3, 5, 2]  # 7: no padding
    time_first = _embedded(lengths).transpose(0, 1)  # [T, B, F]
    assert padding_starts(time_first, False).tolist() == [-1, 3, 5, 2]


def test_no_padding_shows_without_a_repeated_vector_shared_by_rows() -> None:
    x = _embedded([7, 3, 5, 2])
    assert padding_starts(x + torch.randn(7, 6), True) is None  # a position signal added
    edge = torch.stack(
        [
            torch.cat([r[:k], r[k - 1 : k].expand(7 - k, -1)])
            for r, k in zip(x, [7, 3, 5, 2], strict=True)
        ]
    )
    assert padding_starts(edge, True) is None  # each row padded with its own last vector
    assert padding_starts(_embedded([7, 6]), True) is None  # one padded position only


def _calls(x: torch.Tensor, given: list[int], calls: int) -> list[Finding]:
    found: list[Finding] = []
    check = PackedLengths(found.append, lambda: True)
    check.install()
    try:
        for _ in range(calls):
            # (the module's name: one imported before the check's install is the original)
            rnn.pack_padded_sequence(x, torch.tensor(given), batch_first=True, enforce_sorted=False)
    finally:
        check.uninstall()
    return found


def test_lengths_sorted_apart_from_the_rows_are_named() -> None:
    lengths = [4, 9, 2, 12, 6, 3, 10, 5]
    x = _embedded(lengths)
    sorted_apart = sorted(lengths, reverse=True)
    assert _calls(x, sorted_apart, CALLS - 1) == []
    found = _calls(x, sorted_apart, CALLS)
    assert [f.code for f in found] == ["packed-lengths-mismatch"]
    evidence = found[0].evidence
    assert evidence["rows_cut"] > 0 and evidence["rows_read_past_padding"] > 0
    assert evidence["row"] == 0 and evidence["given_length"] == 12
    assert evidence["padding_starts"] == 4
    lines = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "rnn.pack_padded_sequence(" in text)
    assert found[0].where.endswith(f"test_packing.py:{line}")  # the call's line


def test_each_rows_own_length_and_one_position_either_way_are_not_named() -> None:
    lengths = [4, 9, 2, 12, 6, 3, 10, 5]
    x = _embedded(lengths)
    assert _calls(x, lengths, 2 * CALLS) == []
    assert _calls(x, [k + 1 for k in lengths[:3]] + lengths[3:], 2 * CALLS) == []  # an EOS
    assert _calls(x, [k - 1 for k in lengths], 2 * CALLS) == []  # all but the last


def test_rows_only_cut_short_or_only_read_past_their_padding_are_not_named() -> None:
    """A forecaster's history packed without its horizon, a truncation by the lengths; rows
    that end in zeros of their own: each alone has its reasons."""
    lengths = [4, 9, 5, 12, 6, 7, 10, 5]
    x = _embedded(lengths)
    assert _calls(x, [k - 3 for k in lengths], 2 * CALLS) == []  # the last 3 held out
    assert _calls(x, [min(k, 5) for k in lengths], 2 * CALLS) == []  # truncated to 5
    quiet = x.clone()
    for row, k in enumerate(lengths[:4]):
        quiet[row, k - 3 : k] = 0  # each of 4 rows ends in 3 steps of zeros
    assert _calls(quiet, lengths, 2 * CALLS) == []


def test_a_scalar_series_read_past_its_zeros_is_not_named() -> None:
    """Padded with 0, a series' own 0s at its end look like padding: only rows cut short
    count for vectors of fewer than 4 features."""
    rows = [torch.tensor([1.0, 2.0, 0.0, 0.0, 0.0]), torch.tensor([3.0, 1.0]), torch.ones(3)]
    x = pad_sequence(rows, batch_first=True)[..., None]  # [3, 5, 1]
    assert padding_starts(x, True).tolist() == [2, 2, 3]
    assert _calls(x, [5, 2, 3], 2 * CALLS) == []


def test_an_embeddings_padding_ids_tell_where_rows_end_and_ids_read_past_count_alone() -> None:
    """Lengths counted before tokens were filtered out: every row reads padding ids, which
    are padding whatever their vectors look like."""
    lengths = [4, 9, 2, 12, 6, 3, 10, 5]
    embed = nn.Embedding(10, 6, padding_idx=0)
    ids = pad_sequence([torch.randint(1, 10, (k,)) for k in lengths], batch_first=True)
    x = embed(ids)  # [8, 12, 6]
    assert padding_ids_start(x, True).tolist() == lengths
    assert padding_ids_start(embed(ids.t()), False).tolist() == lengths  # time first
    assert padding_ids_start(x.detach(), True) is None  # no autograd node: read by the vectors
    assert _calls(x, lengths, 2 * CALLS) == []
    found = _calls(x, [min(k + 3, 12) for k in lengths], CALLS)
    assert [f.code for f in found] == ["packed-lengths-mismatch"]
