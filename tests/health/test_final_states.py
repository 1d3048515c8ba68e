"""``rnn-state-after-padding``: a recurrent layer's final state read off rows padded at their
end, given to it as a plain tensor, not packed."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import rnn
from torch.nn.utils.rnn import pack_padded_sequence

from treeqa.health.final_states import STEPS, FinalStates, row_ends
from treeqa.health.findings import Finding

V, D, H, B, T, C = 20, 8, 6, 16, 12, 3
PAD = 0

Read = Callable[[torch.Tensor, tuple, torch.Tensor], torch.Tensor]


def _rows(
    left: bool = False, pad: int = PAD, shortest: int = 3
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids [B, T] of rows of ``shortest`` to T words padded with ``pad`` at their end (at their
    start with ``left``), and their lengths [B]."""
    lengths = torch.randint(shortest, T + 1, (B,))
    lengths[0] = shortest  # (at least one padded row)
    ids = torch.randint(1, V - 1, (B, T))  # (V - 1: the padding of an Embedding without one)
    at = torch.arange(T)[None]
    inside = at >= T - lengths[:, None] if left else at < lengths[:, None]
    return torch.where(inside, ids, pad), lengths


def _findings(
    read: Read,
    steps: int = STEPS,
    rnn: nn.RNNBase | None = None,
    padding_idx: int | None = PAD,
    packed: bool = False,
    **rows,
) -> list[str]:
    """``steps`` sampled steps of an Embedding and ``rnn`` (an LSTM) over padded rows, the loss
    a cross-entropy over ``read(out, states, lengths)``: the codes found."""
    torch.manual_seed(0)
    found: list[Finding] = []
    check = FinalStates(found.append)
    embed = nn.Embedding(V, D, padding_idx=padding_idx)
    rnn = rnn or nn.LSTM(D, H, batch_first=True)
    head = nn.Linear(H * (2 if rnn.bidirectional else 1), C)
    rnn.register_forward_hook(lambda m, args, out: check.note("rnn", m, args, out))
    for step in range(1, steps + 1):
        check.begin_step()
        ids, lengths = _rows(**rows)
        x = embed(ids if rnn.batch_first else ids.t())
        if packed:
            x = pack_padded_sequence(x, lengths, rnn.batch_first, enforce_sorted=False)
        out, states = rnn(x)
        loss = F.cross_entropy(head(read(out, states, lengths)), torch.randint(0, C, (B,)))
        loss.backward()
        check.judge(step)
    return [f.code for f in found]


def _h_n(out: torch.Tensor, states: tuple, lengths: torch.Tensor) -> torch.Tensor:
    return states[0][-1]  # [B, H]


def _last_output(out: torch.Tensor, states: tuple, lengths: torch.Tensor) -> torch.Tensor:
    return out[:, -1]


def _output_at_last_word(out: torch.Tensor, states: tuple, lengths: torch.Tensor) -> torch.Tensor:
    return out[torch.arange(B), lengths - 1]


def test_the_final_state_of_rows_padded_at_their_end_is_named() -> None:
    assert _findings(_h_n) == ["rnn-state-after-padding"]
    assert _findings(_last_output) == ["rnn-state-after-padding"]
    assert _findings(_h_n, steps=STEPS - 1) == []
    gru = nn.GRU(D, H, num_layers=2, batch_first=True)
    assert _findings(lambda out, h, lengths: h[-1], rnn=gru) == ["rnn-state-after-padding"]


def test_rows_read_at_their_last_word_packed_or_padded_at_their_start_are_not() -> None:
    assert _findings(_output_at_last_word) == []
    assert _findings(_h_n, packed=True) == []  # h_n is each row's state at its last word
    assert _findings(_h_n, left=True) == []  # every row ends in a word
    # (a mean over each row's words leaves its padding no gradient)
    assert _findings(lambda out, s, lengths: _masked_mean(out, lengths)) == []


def _masked_mean(out: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    words = (torch.arange(T)[None] < lengths[:, None]).float()[..., None]  # [B, T, 1]
    return (out * words).sum(1) / words.sum(1)


def test_a_bidirectional_layers_forward_state_counts_its_backward_state_does_not() -> None:
    lstm = nn.LSTM(D, H, batch_first=True, bidirectional=True)
    both = _findings(lambda out, s, lengths: torch.cat([s[0][-2], s[0][-1]], 1), rnn=lstm)
    assert both == ["rnn-state-after-padding"]

    def backward_only(out: torch.Tensor, s: tuple, lengths: torch.Tensor) -> torch.Tensor:
        forward = out[torch.arange(B), lengths - 1, :H]  # the forward half at the last word
        return torch.cat([forward, s[0][-1]], 1)  # and the backward half's h_n, at position 0

    lstm = nn.LSTM(D, H, batch_first=True, bidirectional=True)
    assert _findings(backward_only, rnn=lstm) == []


def test_time_first_layers_and_padding_without_a_padding_idx_are_read() -> None:
    lstm = nn.LSTM(D, H)  # [T, B, D]
    assert _findings(_h_n, rnn=lstm) == ["rnn-state-after-padding"]
    # no padding_idx: the id the padded rows end in a run of
    assert _findings(_h_n, padding_idx=None, pad=V - 1) == ["rnn-state-after-padding"]


def _starts(x: torch.Tensor, batch_first: bool) -> list[int]:
    ends = row_ends(x, batch_first)
    assert ends is not None
    return ends[0].tolist()


def test_padding_is_read_off_ids_or_off_a_repeated_vector() -> None:
    ids = torch.tensor([[3, 4, 0, 0], [5, 6, 7, 0], [1, 2, 3, 4]])
    embedded = nn.Embedding(8, 4, padding_idx=0)(ids)
    assert _starts(embedded, batch_first=True) == [2, 3, 4]
    assert row_ends(embedded, batch_first=True)[1]  # exactly: off its padding_idx
    assert not row_ends(nn.Embedding(8, 4)(ids), batch_first=True)[1]  # a run of one id
    assert _starts(nn.Embedding(8, 4)(ids), batch_first=True) == [2, 3, 4]
    series = torch.randn(3, 4, 5)
    series[0, 2:] = 0.0
    series[1, 3:] = 0.0
    assert _starts(series, batch_first=True) == [2, 3, 4]
    assert _starts(series[..., :1], batch_first=True) == [2, 3, 4]  # one feature
    assert row_ends(torch.randn(3, 4, 5), batch_first=True) is None  # no padding
    # a value the rows end in a run of, found before their ends too, is data: a word of a
    # small vocabulary, a series' zeros
    bits = torch.tensor([[0, 1, 1, 1], [1, 0, 1, 1], [0, 0, 1, 0]])
    assert row_ends(nn.Embedding(2, 4)(bits), batch_first=True) is None
    series[2, 0] = 0.0
    assert row_ends(series, batch_first=True) is None


def test_a_batch_with_few_padded_rows_is_not_judged() -> None:
    # rows of T - 1 words: one padding position each, too few to read a state through
    assert _findings(_h_n, shortest=T - 1) == []


def _unpacked_findings(read: Read) -> list[str]:
    """STEPS sampled steps of an LSTM over packed rows whose output, padded again by
    ``pad_packed_sequence``, is read by ``read(out, (), lengths)``: the codes found."""
    torch.manual_seed(0)
    found: list[Finding] = []
    check = FinalStates(found.append)
    embed, lstm, head = nn.Embedding(V, D, padding_idx=PAD), nn.LSTM(D, H), nn.Linear(H, C)
    check.install()
    try:
        for step in range(1, STEPS + 1):
            check.begin_step()
            ids, lengths = _rows()
            packed = pack_padded_sequence(embed(ids.t()), lengths, enforce_sorted=False)
            out, _ = rnn.pad_packed_sequence(lstm(packed)[0], batch_first=True)  # [B, T', H]
            loss = F.cross_entropy(head(read(out, (), lengths)), torch.randint(0, C, (B,)))
            loss.backward()
            check.judge(step)
    finally:
        check.uninstall()
    return [f.code for f in found]


def test_pad_packed_sequences_output_read_at_its_last_position_is_named() -> None:
    assert _unpacked_findings(_last_output) == ["rnn-state-after-padding"]  # zeros, for most
    assert _unpacked_findings(_output_at_last_word) == []


def test_ids_are_read_through_layers_that_keep_each_position_where_it_was() -> None:
    ids = torch.tensor([[3, 4, 0, 0], [5, 6, 7, 0], [1, 2, 3, 4]])  # 0 pads, nowhere else
    words, positions = nn.Embedding(8, 4), nn.Embedding(4, 4)
    assert _starts(words(ids) + positions(torch.arange(4)), True) == [2, 3, 4]
    projected = torch.relu(nn.Linear(4, 4)(F.dropout(words(ids), 0.5)))
    assert _starts(projected, True) == [2, 3, 4]
    below = nn.LSTM(4, 4, batch_first=True)(words(ids))[0]  # a second layer's input
    assert _starts(below, True) == [2, 3, 4]
    assert _starts(words(ids).transpose(0, 1), False) == [2, 3, 4]
    cased = torch.cat([words(ids), positions(ids % 4)], -1)  # features joined by cat
    assert _starts(F.dropout(cased, 0.5), True) == [2, 3, 4]
    # rows flipped: their padding comes first, and their last position is a word
    assert row_ends(words(ids).flip(1), True) is None


def test_rows_of_one_repeated_input_have_no_last_word_to_read() -> None:
    """A decoder run on zeros after an encoder: every position of every row is one vector."""
    found: list[Finding] = []
    check = FinalStates(found.append)
    gru, head = nn.GRU(D, H, batch_first=True), nn.Linear(H, C)
    gru.register_forward_hook(lambda m, args, out: check.note("decoder", m, args, out))
    for step in range(1, STEPS + 1):
        check.begin_step()
        out, _ = gru(torch.zeros(B, T, D), torch.randn(1, B, H))
        F.cross_entropy(head(out[:, -1]), torch.randint(0, C, (B,))).backward()
        check.judge(step)
    assert found == []


def test_no_gradient_hook_outlives_its_step() -> None:
    """A hook left on a tensor of the script's graph that held the monitor (and through it
    the script's models and their globals) made a cycle through autograd's nodes that gc
    cannot collect: a script run in process kept its namespace alive after it ended."""
    check = FinalStates(lambda found: None)
    gru = nn.GRU(D, H, batch_first=True)
    kept: list[torch.Tensor] = []
    gru.register_forward_hook(lambda m, args, out: kept.append(out[0]))
    gru.register_forward_hook(lambda m, args, out: check.note("rnn", m, args, out))
    for ends_with in (check.judge, lambda step: check.uninstall()):  # a step's end, a run's
        check.begin_step()
        ids, _ = _rows()
        out, h = gru(nn.Embedding(V, D, padding_idx=PAD)(ids))
        assert kept[-1]._backward_hooks  # read on this sampled step
        h[-1].sum().backward()
        ends_with(1)
        assert not kept[-1]._backward_hooks and check.handles == []
