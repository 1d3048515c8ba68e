"""``causal-mask-missing``: a next-token target read against what the forward's attention let
each position see."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health import run_doctor
from treeqa.health.causal import STEPS, _per_row, _scores_see_next, _sdpa_sees_next
from treeqa.health.findings import Finding
from treeqa.health.lookahead import PROBES
from treeqa.health.masks import AttentionMasks

B, T = 4, 10


def _text() -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] ids and their next-token targets [B, T]."""
    stream = torch.randint(0, 50, (B, T + 1))
    return stream[:, :-1], stream[:, 1:]


def _queries(*shape: int) -> torch.Tensor:
    """Queries (keys too) as a model computes them: a product with a weight."""
    return torch.randn(*shape, 8) @ (0.3 * torch.eye(8)).requires_grad_()


def _causal(t: int = T) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()


def test_what_each_query_may_see_of_the_next_key() -> None:
    q = torch.randn(B, 2, T, 8)
    assert _sdpa_sees_next((q, q, q), {"is_causal": True}).tolist() == [False] * (T - 1)
    assert _sdpa_sees_next((q, q, q), {}).tolist() == [True] * (T - 1)
    assert _sdpa_sees_next((q, q, q, _causal()), {}).sum() == 0
    additive = torch.zeros(B, 1, T, T).masked_fill(~_causal(), float("-inf"))
    assert _sdpa_sees_next((q, q, q, additive), {}).shape == (B, 1, T - 1)
    assert _sdpa_sees_next((q, q, q, additive), {}).sum() == 0
    cross = torch.randn(B, 2, T + 3, 8)  # keys of another length: no self-attention
    assert _sdpa_sees_next((q, cross, cross), {}) is None
    keys = _queries(B * 2, T)
    scores = keys @ keys.transpose(1, 2)  # nn.MultiheadAttention's [B x heads, T, T]
    assert _per_row(_scores_see_next((scores, -1), {}), B).shape == (B, T - 1)
    masked = scores.masked_fill(~_causal(), float("-inf"))
    assert _scores_see_next((masked, -1), {}).sum() == 0
    assert _scores_see_next((scores, 1), {}) is None  # a softmax over queries: no attention


def _steps(
    forward: Any,
    ids: Any,
    target: torch.Tensor,
    steps: int,
    model: nn.Module | None = None,
    loss: float = 0.01,
    given: tuple[Any, ...] = (),
    then: Any = None,
    made_by: Any = None,
    ignore: int = -100,
) -> list[Finding]:
    """``steps`` sampled steps: a forward given ``ids`` (and ``given``) that runs
    ``forward()``, then a loss over ``target`` (made by ``made_by()``, of logits; its
    ``ignore_index`` ``ignore``) and a backward of it (or of ``then(it)``); the run's losses end
    at ``loss``."""
    found: list[Finding] = []
    check = AttentionMasks(found.append, lambda: True)
    try:
        for _ in range(steps):
            check.begin(model or nn.Identity(), (ids, *given), {})
            forward()
            check.end()
            made = made_by() if made_by else torch.ones(1, requires_grad=True).sum()
            check.causal.target(target, made, ignore)
            check.causal.backward((then(made) if then else made).grad_fn)
    finally:
        check.end()
    check.causal.finish([1, 2, 3, 4], [2.0, 1.0, 0.5, loss])
    return found


def _attention(mask: torch.Tensor | None = None, fused: bool = False) -> Any:
    q = _queries(B, 2, T)
    if fused:
        return lambda: F.scaled_dot_product_attention(q, q, q, mask)
    scores = q @ q.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return lambda: F.softmax(scores, dim=-1)


def test_a_language_model_whose_attention_sees_the_next_token_is_named() -> None:
    ids, next_ids = _text()
    assert _steps(_attention(), ids, next_ids.reshape(-1), STEPS - 1) == []
    found = _steps(_attention(), ids, next_ids.reshape(-1), STEPS)
    assert [f.code for f in found] == ["causal-mask-missing"]
    assert found[0].evidence["read_by"] == "softmax"
    assert found[0].evidence["positions"] == B * (T - 1)
    found = _steps(_attention(fused=True), ids, next_ids[:, :-1].reshape(-1), STEPS)
    assert [f.evidence["read_by"] for f in found] == ["scaled_dot_product_attention"]


def test_masked_attention_and_other_targets_are_not_named() -> None:
    ids, next_ids = _text()
    assert _steps(_attention(_causal()), ids, next_ids, 3 * STEPS) == []
    assert _steps(_attention(_causal(), fused=True), ids, next_ids, 3 * STEPS) == []
    masked_lm = torch.where(torch.rand(B, T) < 0.3, ids, -100)  # the ids themselves, masked
    assert _steps(_attention(), ids, masked_lm, 3 * STEPS) == []
    tags = ids % 3  # a tagger's labels
    assert _steps(_attention(), ids, tags, 3 * STEPS) == []
    prefix = _causal()
    prefix[:, : T // 2] = True  # the prefix attends both ways; targets only after it
    after = next_ids.clone()
    after[:, : T // 2] = -100
    assert _steps(_attention(prefix, fused=True), ids, after, 3 * STEPS) == []


def test_time_first_ids_and_targets_are_read() -> None:
    ids, next_ids = _text()
    found = _steps(_attention(), ids.t(), next_ids.t().reshape(-1), STEPS)
    assert len(found) == 1


def test_recurrent_models_by_their_directions() -> None:
    ids, next_ids = _text()
    both_ways = nn.LSTM(4, 4, bidirectional=True)
    found = _steps(lambda: None, ids, next_ids, STEPS, model=both_ways)
    assert [f.evidence["read_by"] for f in found] == ["rnn"]
    one_way = nn.ModuleList([nn.LSTM(4, 4), nn.LSTM(4, 4, bidirectional=True)])
    assert _steps(lambda: None, ids, next_ids, 3 * STEPS, model=one_way) == []
    # a recurrent decoder's attention over a source as long as its target is no leak
    assert _steps(_attention(), ids, next_ids, 3 * STEPS, model=one_way) == []
    # A seq2seq's decoder stepped by an LSTMCell beside its bidirectional encoder (of the
    # source) was named: the cell reads one way.
    seq2seq = nn.ModuleList([nn.LSTM(4, 4, bidirectional=True), nn.LSTMCell(4, 4)])
    assert _steps(lambda: None, ids, next_ids, 3 * STEPS, model=seq2seq) == []


def test_a_mask_soft_capped_after_it_was_filled_still_hides_the_future() -> None:
    """``30 * tanh(s / 30)`` of a filled score is -30, far below the query's best."""
    ids, next_ids = _text()
    q = _queries(B, 2, T)
    scores = (q @ q.transpose(-2, -1)).masked_fill(~_causal(), float("-inf"))
    capped = 30 * torch.tanh(scores / 30)
    assert _steps(lambda: capped.softmax(-1), ids, next_ids, 3 * STEPS) == []


def test_a_key_padding_mask_alone_hides_no_later_key() -> None:
    ids, next_ids = _text()
    padding = torch.zeros(B, 1, 1, T, dtype=torch.bool)  # [B, 1, 1, T]: True takes part
    padding[:, ..., :8] = True
    found = _steps(_attention(padding, fused=True), ids, next_ids, STEPS)
    assert len(found) == 1


def test_a_deep_encoder_over_a_source_as_long_does_not_crowd_out_the_decoder() -> None:
    """Twelve encoder reads see everything (the source); the decoder's one is causal."""
    ids, next_ids = _text()
    encoder = _attention(fused=True)
    decoder = _attention(_causal(), fused=True)

    def seq2seq() -> None:
        for _ in range(12):
            encoder()
        decoder()

    assert _steps(seq2seq, ids, next_ids, 3 * STEPS) == []


def test_a_softmax_over_a_vocabulary_as_large_as_the_sequence_is_no_attention() -> None:
    """Logits [B, T, V] with V = T from a Linear: their softmax is no [T, T] attention."""
    ids, next_ids = _text()
    head = nn.Linear(8, T)
    logits = head(torch.randn(B, T, 8))
    assert _steps(lambda: logits.softmax(-1), ids, next_ids, 3 * STEPS) == []


def _embedding(ids: torch.Tensor, forward: Any) -> Any:
    """``forward`` after an Embedding's lookup of ``ids``."""
    table = torch.randn(50, 8)

    def run() -> None:
        F.embedding(ids, table)
        forward()

    return run


def test_a_causal_model_trained_on_its_own_ids_is_named() -> None:
    """Targets that are the input ids, not shifted by one, embedded as given, under a causal
    mask."""
    ids, _ = _text()
    causal = _embedding(ids, _attention(_causal()))
    assert _steps(causal, ids, ids, STEPS - 1) == []
    found = _steps(causal, ids, ids.reshape(-1), STEPS)
    assert [f.code for f in found] == ["targets-not-shifted"]
    assert found[0].evidence["targets_own_id"] == B * (T - 1)
    # logits[:, :-1] against ids[:, :-1]: the logits shifted, the labels not
    fused = _embedding(ids.view(B, T), _attention(_causal(), fused=True))
    found = _steps(fused, ids, ids[:, :-1], STEPS)
    assert [f.evidence["read_by"] for f in found] == ["scaled_dot_product_attention"]
    padded = ids.clone()
    padded[:, -3:] = -100
    assert len(_steps(fused, ids, padded, STEPS)) == 1
    found = _steps(_embedding(ids.t(), _attention(_causal())), ids.t(), ids.t(), STEPS)
    assert len(found) == 1  # time first, [T, B]
    assert found[0].evidence["last_quarter_loss"] == 0.01
    # int32 ids, embedded as ids.long(): a copy of them
    small = ids.to(torch.int32)
    assert len(_steps(_embedding(small.long(), _attention(_causal())), small, small, STEPS)) == 1
    # model(ids, labels=ids): the very tensor embedded is also given as the labels
    assert len(_steps(causal_embedded(ids), ids, ids, STEPS, given=(ids,))) == 1


def _logits(rows: slice) -> Any:
    """A loss of logits [B, T, 5] at the positions ``rows`` of the time dim."""
    hidden = torch.randn(B, T, 8, requires_grad=True)
    return lambda: F.linear(hidden[:, rows], torch.randn(5, 8)).sum()


def test_targets_two_ids_on_are_named_where_they_are_the_steps_loss() -> None:
    """Labels shifted by one before a loss that shifts them again: the target of position i
    is id i + 2. A term of a sum with another cross-entropy (a multi-token model's head for
    the token after the next beside its next-token loss) is not named."""
    ids, _ = _text()
    twice = torch.cat([ids[:, 2:], torch.full((B, 2), -100)], 1)  # [B, T]
    causal = _embedding(ids, _attention(_causal()))
    assert _steps(causal, ids, twice, STEPS - 1) == []
    found = _steps(causal, ids, twice.reshape(-1), STEPS, loss=2.0)
    assert [f.code for f in found] == ["targets-shifted-twice"]
    assert found[0].evidence["targets_two_on"] == found[0].evidence["positions"] == B * (T - 2)
    # labels shifted already, padded at the end, given to a loss that takes logits[:, :-1]
    # against labels[:, 1:], [B, T - 1]
    labels = torch.cat([ids[:, 1:], torch.full((B, 1), -100)], 1)
    assert len(_steps(causal, ids, labels[:, 1:], STEPS, made_by=_logits(slice(0, -1)))) == 1
    head = torch.randn(3, 5, requires_grad=True)
    next_token = lambda loss: loss + F.cross_entropy(head, torch.zeros(3).long())  # noqa: E731
    assert _steps(causal, ids, twice, 3 * STEPS, then=next_token) == []
    # plus a term that is no other classification loss: a z-loss, a router's balance term
    z_loss = lambda loss: loss + 1e-4 * head.logsumexp(-1).square().mean()  # noqa: E731
    assert len(_steps(causal, ids, twice, STEPS, then=z_loss)) == 1
    # a loss of reduction="none", masked and averaged: the step's loss still
    masked = lambda loss: (loss * torch.ones(1)).sum() / torch.tensor(4.0)  # noqa: E731
    assert len(_steps(causal, ids, twice, STEPS, then=masked)) == 1
    assert _steps(_embedding(ids, _attention()), ids, twice, 3 * STEPS) == []  # not causal
    runs = ids[:, :1].expand(B, T).clone()  # one id a row: every target matches
    assert _steps(_embedding(runs, _attention(_causal())), runs, runs[:, 2:], 3 * STEPS) == []


def test_targets_at_the_ignore_index_given_are_left_out() -> None:
    """A prompt labelled with the pad id 0 and ``ignore_index=0``: its positions are no
    targets, and the answer's, two on, are read alone."""
    ids, _ = _text()
    ids = ids.clamp(min=1)  # (no id is the pad id)
    twice = torch.cat([ids[:, 2:], torch.zeros(B, 2, dtype=ids.dtype)], 1)  # [B, T]
    twice[:, :3] = 0  # the prompt's positions
    causal = _embedding(ids, _attention(_causal()))
    assert _steps(causal, ids, twice, 3 * STEPS) == []  # (read as targets, the zeros break it)
    assert len(_steps(causal, ids, twice, STEPS, ignore=0)) == 1


def test_targets_two_on_of_a_one_way_rnn_are_named_and_of_rows_one_on_are_not() -> None:
    """An LSTM language model is causal by its recurrence. Over one position fewer than the
    ids, the logits must be of the model's first positions (``logits[:, :-1]``): a model that
    reads a conditioning token and leaves its position out (``h[:, 1:]``), trained on ids
    shifted once in the data, has rows one position on from its ids', and is right."""
    ids, _ = _text()
    twice = torch.cat([ids[:, 2:], torch.full((B, 2), -100)], 1)[:, :-1]  # [B, T - 1]
    embedded = _embedding(ids, lambda: None)
    first = _logits(slice(0, -1))
    assert len(_steps(embedded, ids, twice, STEPS, model=nn.LSTM(4, 4), made_by=first)) == 1
    both_ways = nn.LSTM(4, 4, bidirectional=True)
    assert _steps(embedded, ids, twice, 3 * STEPS, model=both_ways, made_by=first) == []
    causal = _embedding(ids, _attention(_causal()))
    assert len(_steps(causal, ids, twice, STEPS, made_by=first)) == 1
    assert _steps(causal, ids, twice, 3 * STEPS, made_by=_logits(slice(1, None))) == []
    assert _steps(causal, ids, twice, 3 * STEPS) == []  # (no slice found)


def test_own_ids_are_named_only_where_the_model_learned_to_copy_them() -> None:
    """A model that shifts its ids itself after the lookup (hidden states rolled, a strict
    mask) predicts the next token: its loss stays at the text's uncertainty."""
    ids, _ = _text()
    causal = _embedding(ids, _attention(_causal()))
    assert _steps(causal, ids, ids, 3 * STEPS, loss=0.8) == []


def causal_embedded(ids: torch.Tensor) -> Any:
    return _embedding(ids, _attention(_causal()))


def test_own_ids_read_both_ways_shifted_inside_or_by_an_rnn_are_not_named() -> None:
    """An autoencoder over tokens (no causal mask) reconstructs its input on purpose; a model
    that puts a BOS before its ids itself embeds them shifted; an RNN alone cannot be told
    from a recurrent autoencoder's encoder; runs of one id match both ways."""
    ids, _ = _text()
    assert _steps(_embedding(ids, _attention()), ids, ids, 3 * STEPS) == []
    assert _steps(_embedding(ids, _attention(fused=True)), ids, ids, 3 * STEPS) == []
    shifted = torch.cat([torch.zeros(B, 1, dtype=ids.dtype), ids[:, :-1]], 1)
    assert _steps(_embedding(shifted, _attention(_causal())), ids, ids, 3 * STEPS) == []
    assert _steps(_attention(_causal()), ids, ids, 3 * STEPS) == []  # (nothing embedded)
    # a seq2seq model given its labels (T5's labels=), its source embedded: the labels are
    # no input ids of its own
    source, labels = _text()
    seq2seq = _embedding(source, _attention(_causal()))
    assert _steps(seq2seq, source, labels, 3 * STEPS, given=(labels,)) == []
    other = _embedding(labels, _attention(_causal()))  # another tensor looked up
    assert _steps(other, source, source, 3 * STEPS, given=(labels,)) == []
    recurrent = nn.ModuleList([nn.GRU(4, 4)])  # a GRU encoder beside causal attention
    assert _steps(causal_embedded(ids), ids, ids, 3 * STEPS, model=recurrent) == []
    assert _steps(lambda: None, ids, ids, 3 * STEPS, model=nn.LSTM(4, 4)) == []
    runs = ids[:, :1].expand(B, T).clone()  # one id a row
    runs[:, -1] = 7
    assert _steps(_embedding(runs, _attention(_causal())), runs, runs, 3 * STEPS) == []


def test_labels_given_beside_the_decoder_ids_are_not_read_against_themselves() -> None:
    """A seq2seq model given its labels first (``model(labels=..., decoder_input_ids=...)``)
    and the decoder's ids, the labels shifted right: the decoder's ids are read, and their
    attention without a causal mask is named."""
    labels, _ = _text()
    decoder_ids = torch.cat([torch.zeros(B, 1, dtype=labels.dtype), labels[:, :-1]], 1)
    unmasked = _embedding(decoder_ids, _attention())
    found = _steps(unmasked, labels, labels, STEPS, given=(decoder_ids,))
    assert [f.code for f in found] == ["causal-mask-missing"]


V, D = 20, 8


class _Convolutional(nn.Module):
    """A language model of two convolutions over its embeddings: ``pad`` positions on the left
    and ``right`` on the right of each (a causal one pads k - 1 on the left alone); ``norm``
    batch norm over time, ``classes_first`` logits [B, V, T] for the loss."""

    def __init__(self, pad: int = 2, right: int = 0, norm: bool = False):
        super().__init__()
        self.pad, self.right = pad, right
        self.embed = nn.Embedding(V, D)
        self.convs = nn.ModuleList(nn.Conv1d(D, D, pad + right + 1) for _ in range(2))
        self.norm = nn.BatchNorm1d(D) if norm else nn.Identity()
        self.head = nn.Conv1d(D, V, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids).transpose(1, 2)  # [B, D, T]
        for conv in self.convs:
            h = h + torch.relu(self.norm(conv(F.pad(h, (self.pad, self.right)))))
        return self.head(h)  # [B, V, T]


class _Attending(nn.Module):
    """One attention layer by hand; ``after``: its causal mask applied after the softmax and
    the weights renormalised; ``backwards``: an LSTM both ways, whose forward half alone
    predicts (ELMo's), instead; ``block``: attention open within blocks of that many
    positions, causal between them (a chunked model without its mask inside each chunk)."""

    def __init__(self, after: bool = False, backwards: bool = False, block: int = 0):
        super().__init__()
        self.after, self.backwards, self.block = after, backwards, block
        self.embed = nn.Embedding(V, D)
        self.qk = nn.Linear(D, 2 * D)
        self.rnn = nn.LSTM(D, D, batch_first=True, bidirectional=True)
        self.head = nn.Linear(D, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)  # [B, T, D]
        if self.backwards:
            return self.head(self.rnn(h)[0][..., :D])  # [B, T, V]: the forward half's
        q, k = self.qk(h).chunk(2, -1)
        scores = q @ k.transpose(1, 2)  # [B, T, T]
        if self.block:
            chunk = torch.arange(ids.shape[1]) // self.block
            scores = scores.masked_fill(chunk[None, :] > chunk[:, None], float("-inf"))
        weights = scores.softmax(-1)
        if self.after:
            weights = weights * torch.ones_like(weights[0]).tril()
            weights = weights / weights.sum(-1, keepdim=True)
        return self.head(h + weights @ h)  # [B, T, V]


def _trained(
    model: nn.Module,
    steps: int,
    own_ids: bool = False,
    loss: float = 2.0,
    check: AttentionMasks | None = None,
    length: int = T,
) -> Any:
    """``steps`` sampled steps of ``model`` on next-token targets (the ids themselves with
    ``own_ids``) through the checks (``check``, or new ones), each loss backpropagated; the
    findings, and the check."""
    torch.manual_seed(0)
    found: list[Finding] = []
    check = check or AttentionMasks(found.append, lambda: True)
    for _ in range(steps):
        stream = torch.randint(0, V, (B, length + 1))
        ids, targets = stream[:, :-1], stream[:, :-1] if own_ids else stream[:, 1:]
        model.zero_grad(set_to_none=True)
        check.begin(model, (ids,), {})
        logits = model(ids)
        check.end()
        flat = logits if logits.shape[1] == V and logits.dim() == 3 else logits.reshape(-1, V)
        target = targets if flat.dim() == 3 else targets.reshape(-1)
        made = F.cross_entropy(flat, target)
        check.causal.target(target, made, -100, flat)
        assert all(p.grad is None for p in model.parameters())  # (the gradient read adds none)
        check.causal.backward(made.grad_fn)
        made.backward()  # (the graph was kept for the script's backward)
    check.causal.finish([1, 2, 3, 4], [3.0, 2.0, 1.0, loss])
    return found, check


def test_a_convolution_padded_on_both_sides_is_named_by_the_gradient() -> None:
    """No attention and no RNN to read: the gradient of a position's logits reaches the next
    token's embedding. Padded on the left alone, it reaches no later token."""
    found, _ = _trained(_Convolutional(pad=1, right=1), STEPS)
    assert [f.code for f in found] == ["causal-mask-missing"]
    assert found[0].evidence["read_by"] == "gradient"
    assert found[0].evidence["next_token_gradient_share"] >= 0.1
    found, check = _trained(_Convolutional(pad=2), 3 * STEPS)
    assert found == [] and check.causal.verdicts.reads == 1  # (known causal after one reading)


def test_batch_norm_over_time_reaches_later_tokens_too_little_to_be_named() -> None:
    """Undecided, the gradient is read again on the 2nd, 4th, 8th ... step, ``PROBES`` at most;
    the steps are not judged."""
    found, check = _trained(_Convolutional(pad=2, norm=True), 24)
    assert found == [] and check.causal.verdicts.reads == 5  # steps 1, 2, 4, 8, 16
    assert check.causal.judged == 0
    check.causal.verdicts.reads = PROBES - 1  # (one read left of the run's)
    _trained(_Convolutional(pad=2, norm=True), 24, check=check)
    assert check.causal.verdicts.reads == PROBES


def test_the_gradient_clears_attention_that_reads_as_unmasked() -> None:
    """A causal mask applied after the softmax, the weights renormalised, and an LSTM both
    ways whose forward half alone predicts: the attention read and the RNN's directions say
    leak, the gradient says causal."""
    assert _trained(_Attending(after=True), 3 * STEPS)[0] == []
    assert _trained(_Attending(backwards=True), 3 * STEPS)[0] == []
    found, _ = _trained(_Attending(), STEPS)  # (unmasked: the attention read names it)
    assert [f.evidence["read_by"] for f in found] == ["softmax"]


def test_a_causal_convolution_trained_on_its_own_ids_is_named() -> None:
    found, _ = _trained(_Convolutional(pad=2), STEPS, own_ids=True, loss=0.01)
    assert [f.code for f in found] == ["targets-not-shifted"]
    assert _trained(_Convolutional(pad=2), STEPS, own_ids=True, loss=1.0)[0] == []
    assert _trained(_Convolutional(pad=1, right=1), 3 * STEPS, own_ids=True, loss=0.01)[0] == []


def test_attention_open_within_blocks_is_named_wherever_the_gradient_reads() -> None:
    """Blocks of 4 or 8 in rows of 16: the middle position, 7, is a block's last, which reads
    no later token; the gradient reads an even position, never a block's last (a first
    version read 7, found the model causal and cleared the step)."""
    for block in (4, 8):
        found, _ = _trained(_Attending(block=block), STEPS, length=16)
        assert [f.code for f in found] == ["causal-mask-missing"]


def test_a_verdict_holds_for_steps_like_the_one_it_was_read_on() -> None:
    """A model masked at first (its reads and the gradient causal) and unmasked later (its
    reads see ahead) is read again, and named."""
    model = _Attending(block=1)  # (blocks of one: causal)
    found, check = _trained(model, 4)
    assert found == [] and check.causal.verdicts.reads == 1
    model.block = T  # (one block: unmasked)
    _trained(model, 6, check=check)  # (more steps leak than did not; findings to ``found``)
    assert check.causal.verdicts.reads > 1  # (read again: steps unlike the first)
    assert [f.code for f in found] == ["causal-mask-missing"]


def test_a_sampled_forwards_lookups_are_let_go_by_its_backward(tmp_path: Any) -> None:
    """The Embedding outputs kept from a sampled forward for its loss's target go at its
    backward where the loss took none (a binary cross-entropy): kept to the next sampled step
    (50 on), they held that forward's graph, named by ``graph-retained``."""
    script = tmp_path / "script.py"
    script.write_text(
        """
import torch
from torch import nn

torch.manual_seed(0)
ids = torch.randint(1, 40, (2000, 20))
y = (ids < 5).any(1).float()


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(40, 16)
        self.rnn = nn.GRU(16, 16, batch_first=True)
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        h, _ = self.rnn(self.embed(x))
        return self.out(h.mean(1)).squeeze(1)


model = Tagger()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for i in range(0, 2000, 25):
    loss = nn.functional.binary_cross_entropy_with_logits(model(ids[i : i + 25]), y[i : i + 25])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
    )
    with contextlib.redirect_stdout(io.StringIO()):
        _, report = run_doctor(["python", str(script)], every=50, stream=io.StringIO())
    assert report["steps"] == 80
    assert [f for f in report["findings"] if f["code"] == "graph-retained"] == []
