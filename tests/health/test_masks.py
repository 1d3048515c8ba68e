"""``attention-mask-inverted``: the keys an attention call's mask leaves out, read against the
padding of the tensors the model was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health.findings import Finding
from treeqa.health.masks import STEPS, AttentionMasks, _padding

PAD = 0


def _tokens(lengths: list[int], length: int = 12, left: bool = False) -> torch.Tensor:
    """[B, length] random ids from 3 up, padded with PAD after (or before) each row's words."""
    tokens = torch.full((len(lengths), length), PAD)
    for row, k in enumerate(lengths):
        words = torch.randint(3, 50, (k,))
        if left:
            tokens[row, length - k :] = words
        else:
            tokens[row, :k] = words
    return tokens


LENGTHS = [5, 9, 3, 12, 7, 4]


def test_padding_is_each_rows_trailing_run_of_the_value_padded_rows_end_in() -> None:
    tokens = _tokens(LENGTHS)
    padding, elsewhere = _padding(tokens[..., None])
    assert padding.sum(1).tolist() == [12 - k for k in LENGTHS]
    assert not elsewhere.any()
    left = _tokens(LENGTHS, left=True)
    assert _padding(left.flip(1)[..., None])[0].flip(1).sum(1).tolist() == [12 - k for k in LENGTHS]
    series = torch.randn(6, 12, 4) * (torch.arange(12) < torch.tensor(LENGTHS)[:, None])[..., None]
    assert _padding(series)[0].sum(1).tolist() == [12 - k for k in LENGTHS]


def _forwards(
    call: Any, inputs: tuple[Any, ...], forwards: int, finish: bool = False
) -> list[Finding]:
    """``forwards`` sampled forwards given ``inputs``, each making the attention ``call()``."""
    found: list[Finding] = []
    check = AttentionMasks(found.append, lambda: True)
    try:
        for _ in range(forwards):
            check.begin(nn.Identity(), inputs, {})
            call()
            check.end()
        if finish:
            check.finish()
    finally:
        check.end()
    # (attention given no mask over padded rows is padding-not-masked's: test_attended.py)
    return [f for f in found if f.code != "padding-not-masked"]


def _sdpa(mask: torch.Tensor) -> Any:
    """A call of scaled_dot_product_attention with ``mask`` [B, S] (True: takes part)."""
    q = torch.randn(mask.shape[0], 2, mask.shape[1], 8)
    return lambda: F.scaled_dot_product_attention(q, q, q, mask[:, None, None, :])


def test_a_boolean_attn_mask_true_for_the_padding_is_named() -> None:
    tokens = _tokens(LENGTHS)
    assert _forwards(_sdpa(tokens == PAD), (tokens,), STEPS - 1) == []
    found = _forwards(_sdpa(tokens == PAD), (tokens,), STEPS)
    assert [f.code for f in found] == ["attention-mask-inverted"]
    evidence = found[0].evidence
    assert evidence["function"] == "scaled_dot_product_attention"
    assert evidence["padded_rows"] == 5  # row 3 has no padding
    assert (evidence["row"], evidence["row_tokens"], evidence["row_padding"]) == (0, 5, 7)
    lines = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "lambda: F.scaled_dot" in text)
    assert found[0].where.endswith(f"test_masks.py:{line}")


def test_masks_the_right_way_round_are_not_named() -> None:
    tokens = _tokens(LENGTHS)
    assert _forwards(_sdpa(tokens != PAD), (tokens,), 4 * STEPS, finish=True) == []
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    q = torch.randn(6, 2, 12, 8)
    mask = (causal & (tokens != PAD)[:, None, :]) | torch.eye(12, dtype=torch.bool)

    def causal_call() -> Any:
        return F.scaled_dot_product_attention(q, q, q, mask[:, None])

    assert _forwards(causal_call, (tokens,), 4 * STEPS, finish=True) == []
    additive = (1.0 - (tokens != PAD).float()) * -1e9  # a Hugging Face style mask, made right
    assert _forwards(_sdpa(additive), (tokens,), 4 * STEPS, finish=True) == []


def test_key_padding_masks_of_multihead_attention_are_read_batch_first_or_time_first() -> None:
    attention = nn.MultiheadAttention(8, 2)  # time first: [S, B, E]
    tokens = _tokens(LENGTHS)
    x = torch.randn(12, 6, 8)

    def call(mask: torch.Tensor) -> Any:
        return lambda: attention(x, x, x, key_padding_mask=mask)

    time_first = (tokens.t(),)  # [S, B] ids, as the model was given them
    assert _forwards(call(tokens == PAD), time_first, 4 * STEPS) == []
    found = _forwards(call(tokens != PAD), time_first, STEPS)
    assert [f.evidence["function"] for f in found] == ["multi_head_attention_forward"]
    series = x.transpose(0, 1) * (tokens != PAD)[..., None]  # [B, S, F] zeros past the end
    assert _forwards(call(tokens == PAD), ({"series": series},), 4 * STEPS) == []
    assert len(_forwards(call(tokens != PAD), ({"series": series},), STEPS)) == 1


def test_left_padding_inverted_is_named() -> None:
    left = _tokens(LENGTHS, left=True)
    assert _forwards(_sdpa(left != PAD), (left,), 4 * STEPS) == []
    found = _forwards(_sdpa(left == PAD), (left,), STEPS)
    assert [f.evidence["padded_on"] for f in found] == ["left"]


def test_a_fixed_block_opened_alone_is_not_padding_inverted() -> None:
    """Memory slots at every row's end, the only keys a cross-attention reads: one length."""
    tokens = _tokens([9] * 6)
    tokens[:, -3:] = 2  # three slots
    assert _forwards(_sdpa(tokens == 2), (tokens,), 4 * STEPS, finish=True) == []


def test_one_inverted_forward_is_named_at_the_end_where_no_other_was_read() -> None:
    tokens = _tokens(LENGTHS)
    assert len(_forwards(_sdpa(tokens == PAD), (tokens,), 1, finish=True)) == 1
    assert _forwards(_sdpa(tokens == PAD), (tokens,), 1) == []


def test_scores_filled_by_hand_are_read_through_masked_fill() -> None:
    """Attention written by hand: ``scores.masked_fill(mask, -inf)`` before the softmax."""
    tokens = _tokens(LENGTHS)
    scores = torch.randn(6, 2, 12, 12)

    def fill(mask: torch.Tensor, value: float) -> Any:
        return lambda: scores.masked_fill(mask[:, None, None, :], value).softmax(-1)

    assert _forwards(fill(tokens == PAD, float("-inf")), (tokens,), 4 * STEPS) == []
    found = _forwards(fill(tokens != PAD, -1e9), (tokens,), STEPS)
    assert [f.evidence["function"] for f in found] == ["masked_fill"]
    assert _forwards(fill(tokens != PAD, 0.0), (tokens,), 4 * STEPS) == []  # zeroed, not masked
    pooled = torch.randn(6, 1, 12)  # attention pooling's scores [B, 1, S], filled in place
    found = _forwards(lambda: pooled.masked_fill_((tokens != PAD)[:, None], -1e4), (tokens,), STEPS)
    assert [f.evidence["function"] for f in found] == ["masked_fill_"]
    logits = torch.randn(6, 12)  # a pointer's or policy's logits [B, S]: taken slots filled
    assert _forwards(lambda: logits.masked_fill(tokens != PAD, -1e9), (tokens,), 4 * STEPS) == []
    labels = tokens.clone()  # labels set to -100 where not predicted: no scores
    filled = torch.zeros(6, 1, 12, dtype=torch.long)
    assert _forwards(lambda: filled.masked_fill((tokens != PAD)[:, None], -100), (labels,), 8) == []
    assert "masked_fill" not in vars(torch.Tensor)  # the base class's method again


def test_masks_and_segment_ids_given_beside_the_ids_are_no_padding() -> None:
    """A Hugging Face attention_mask (1 for tokens) read from the left is a run of 1s: were it
    read as padding, an inverted mask would match it. Speaker or segment ids end in the last
    turn, which an attention pooling may open alone."""
    tokens = _tokens(LENGTHS)
    attention_mask = (tokens != PAD).long()
    inverted = _sdpa(tokens == PAD)
    assert len(_forwards(inverted, (tokens, attention_mask), STEPS)) == 1
    assert len(_forwards(inverted, ({"input_ids": tokens, "mask": attention_mask},), STEPS)) == 1
    turns = [[3, 4, 5], [2, 6, 4], [5, 5, 2], [4, 3, 5], [6, 2, 4], [3, 3, 6]]
    turn = torch.stack([torch.arange(3).repeat_interleave(torch.tensor(t)) for t in turns])
    assert _forwards(_sdpa(turn == 2), (turn,), 4 * STEPS, finish=True) == []  # the option
    assert _forwards(_sdpa(turn == 2), (turn % 2 + 7,), 4 * STEPS, finish=True) == []
    # an agent (speaker 99) opens and closes each dialogue, users (many ids) between: the reply
    # the pooling opens alone is a run of one value at each row's end, which spoke first too
    turn = turn.repeat(2, 1)  # [12, 12]
    speakers = torch.where(turn == 1, torch.arange(10, 22)[:, None], 99)
    assert _forwards(_sdpa(turn == 2), (speakers,), 4 * STEPS, finish=True) == []


def test_a_prepended_cls_key_and_heads_folded_into_the_batch_are_lined_up() -> None:
    tokens = _tokens(LENGTHS)
    with_cls = torch.cat([torch.zeros(6, 1, dtype=torch.bool), tokens == PAD], 1)  # [B, S + 1]
    assert len(_forwards(_sdpa(with_cls), (tokens,), STEPS)) == 1
    assert _forwards(_sdpa(~with_cls), (tokens,), 4 * STEPS) == []
    folded = (tokens == PAD).repeat_interleave(4, 0)[:, None, :]  # [B x 4 heads, 1, S]
    q = torch.randn(24, 12, 8)
    found = _forwards(lambda: F.scaled_dot_product_attention(q, q, q, folded), (tokens,), STEPS)
    assert len(found) == 1


def test_the_decoders_mask_is_read_after_the_encoders() -> None:
    """A seq2seq forward: the source's mask right, the target's inverted."""
    source, target = _tokens(LENGTHS), _tokens([4, 8, 3, 6, 11, 5])

    def both() -> None:
        _sdpa(source != PAD)()
        _sdpa(target == PAD)()

    found = _forwards(both, (source, target), STEPS)
    assert [f.evidence["padded_rows"] for f in found] == [5]  # (a row of 11: one padding)
