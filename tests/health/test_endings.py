"""``end-token-masked``: the token that ends each text, also the padding id, left out of a
language model's targets with the padding."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from treeqa.health.causal import STEPS
from treeqa.health.findings import Finding
from treeqa.health.masks import AttentionMasks

V, D, B, T = 30, 8, 12, 12
END = 0  # the end-of-text token, given to the tokenizer as its padding token too


class _Causal(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.head = nn.Linear(D, V)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids) * mask[..., None]  # [B, T, D]
        scores = (h @ h.transpose(1, 2)).masked_fill(~torch.ones(T, T).tril().bool(), -1e9)
        return self.head(h + scores.softmax(-1) @ h)  # [B, T, V]


def _batch(
    left: bool = False, pad: int = END, ended: bool = True, ends: tuple[int, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """Texts of 4 to T - 1 tokens, each ending in END (or, unless ``ended``, in a word: one of
    ``ends`` if given), padded with ``pad`` (at the left with ``left``): ids and attention mask
    [B, T]."""
    ids = torch.full((B, T), pad)
    mask = torch.zeros(B, T, dtype=torch.long)
    for row, length in enumerate(torch.randint(4, T, (B,)).tolist()):
        text = torch.cat([torch.randint(1, V - 1, (length - 1,)), torch.tensor([END])])
        if not ended:
            choices = torch.tensor(ends or range(1, V - 1))
            text[-1] = int(choices[torch.randint(len(choices), ())])
        span = slice(T - length, T) if left else slice(0, length)
        ids[row, span], mask[row, span] = text, 1
    return ids, mask


def _trained(
    labels_of,
    steps: int,
    left: bool = False,
    pad: int = END,
    given=True,
    mask_as=None,
    then=None,
    ended=True,
    ends=(),
):
    """``steps`` sampled steps of the model on texts ending in END, padded with ``pad``, its
    labels ``labels_of(ids, mask)``, the mask given as ``mask_as(mask)`` (or not ``given``), the
    loss backpropagated as ``then(loss)``: the findings."""
    torch.manual_seed(0)
    found: list[Finding] = []
    check = AttentionMasks(found.append, lambda: True)
    model = _Causal()
    for _ in range(steps):
        ids, mask = _batch(left, pad, ended, ends)
        labels = labels_of(ids, mask)
        shown = mask_as(mask) if mask_as else mask
        check.begin(model, (ids, shown) if given else (ids,), {})
        logits = model(ids, mask)
        check.end()
        flat = logits[:, :-1].reshape(-1, V)  # the transformers shift: position i, token i + 1
        target = labels[:, 1:].reshape(-1)
        loss = F.cross_entropy(flat, target)
        check.causal.target(target, loss, -100, flat)
        check.causal.backward((then(loss) if then else loss).grad_fn)
    return _not_padding(found)


def _by_id(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """DataCollatorForLanguageModeling's labels: every padding id masked, the end token too."""
    return ids.masked_fill(ids == END, -100)


def _by_position(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return ids.masked_fill(mask == 0, -100)


def test_labels_masked_by_the_padding_id_that_ends_each_text_are_named() -> None:
    assert _trained(_by_id, STEPS - 1) == []
    found = _trained(_by_id, STEPS)
    assert [f.code for f in found] == ["end-token-masked"]
    assert found[0].evidence["rows_ending"] >= B / 2
    assert [f.code for f in _trained(_by_id, STEPS, left=True)] == ["end-token-masked"]


def test_padding_masked_by_position_or_a_padding_token_of_its_own_is_not_named() -> None:
    assert _trained(_by_position, 3 * STEPS) == []
    assert _trained(_by_position, 3 * STEPS, left=True) == []
    own_pad = V - 1  # the end token kept a target; the padding id masked
    assert (
        _trained(lambda ids, mask: ids.masked_fill(ids == own_pad, -100), 3 * STEPS, pad=own_pad)
        == []
    )
    assert _trained(_by_id, 3 * STEPS, given=False) == []  # (no attention mask to read)


def test_a_boolean_floating_or_four_dimensional_mask_is_read() -> None:
    for shown in (
        lambda m: m.bool(),
        lambda m: m.float(),
        lambda m: m[:, None, None, :].bool(),
        lambda m: (1.0 - m) * -1e9,  # additive
    ):
        assert [f.code for f in _trained(_by_id, STEPS, mask_as=shown)] == ["end-token-masked"]


def test_an_end_token_taught_elsewhere_in_the_rows_or_by_another_loss_is_not_named() -> None:
    """A chat whose last turn's end is left out on purpose, earlier turns' ends taught; the
    language model's loss beside a classifier's, or beside another that teaches the end."""

    def last_end_left_out(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        labels = _by_position(ids, mask)
        labels[:, 2] = END  # (an earlier turn's end, taught)
        ids[:, 2] = END
        last = mask.sum(1) - 1
        labels[torch.arange(B), last] = -100
        return labels

    assert _trained(last_end_left_out, 3 * STEPS) == []
    head = torch.randn(3, 4, requires_grad=True)
    classified = lambda loss: loss + F.cross_entropy(head, torch.zeros(3).long())  # noqa: E731
    assert _trained(_by_id, 3 * STEPS, then=classified) == []
    on = (head.detach() > 0).float()
    stops = lambda loss: loss + F.binary_cross_entropy_with_logits(head, on)  # noqa: E731
    assert _trained(_by_id, 3 * STEPS, then=stops) == []
    penalised = lambda loss: loss + 1e-4 * head.square().sum()  # noqa: E731
    assert [f.code for f in _trained(_by_id, STEPS, then=penalised)] == ["end-token-masked"]


def test_padded_texts_that_end_in_no_common_token_are_named() -> None:
    """No end-of-text token appended (GPT-2's and Llama's tokenizers by default): the padded
    rows' texts end in whatever word they end in; padded with an id of its own."""
    pad = V - 1
    by_pad = lambda ids, mask: ids.masked_fill(mask == 0, -100)  # noqa: E731
    found = _trained(by_pad, STEPS, pad=pad, ended=False)
    assert [f.code for f in found] == ["end-token-missing"]
    assert found[0].evidence["rows_padded"] >= 4
    assert [f.code for f in _trained(by_pad, STEPS, pad=pad, ended=False, left=True)] == [
        "end-token-missing"
    ]
    assert _trained(by_pad, 3 * STEPS, pad=pad) == []  # (each text ends in END)


def test_a_key_padding_mask_is_read_the_other_way_round() -> None:
    """``key_padding_mask`` is True for padding: read inverted, as an attention mask."""
    found = _trained(_by_id, STEPS, mask_as=lambda m: m == 0)
    assert [f.code for f in found] == ["end-token-masked"]


def test_an_end_token_the_mask_hides_but_the_labels_keep_is_taught() -> None:
    """The padding token is the end token and the mask is ``ids != pad``, hiding each text's
    end; its label is kept, so the model learns to end (the texts' last attended ids vary)."""

    def end_kept(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        labels = _by_position(ids, mask)
        mask[ids == END] = 0  # (the mask the model is given: ids != pad)
        return labels

    assert _trained(end_kept, 3 * STEPS) == []


def _steps(batches, steps: int = 3 * STEPS) -> list[Finding]:
    """``steps`` sampled steps on ``batches()``: (ids, what the forward is given beside them,
    the mask the model uses, labels); the findings."""
    found: list[Finding] = []
    check = AttentionMasks(found.append, lambda: True)
    model = _Causal()
    torch.manual_seed(0)
    for _ in range(steps):
        ids, given, mask, labels = batches()
        check.begin(model, (ids, *given), {})
        logits = model(ids, mask)
        check.end()
        flat, target = logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1)
        loss = F.cross_entropy(flat, target)
        check.causal.target(target, loss, -100, flat)
        check.causal.backward(loss.grad_fn)
    return _not_padding(found)


def _not_padding(found: list[Finding]) -> list[Finding]:
    """The findings but padding-not-masked's: the model's causal mask leaves left padding open
    to its tokens, which that check names (``test_attended.py``), not these."""
    return [f for f in found if f.code != "padding-not-masked"]


def test_texts_that_end_in_one_of_a_few_tokens_are_ended() -> None:
    """'.', '?' or '!'; a stop token per speaker: few ids end many texts."""
    by_pad = lambda ids, mask: ids.masked_fill(mask == 0, -100)  # noqa: E731
    assert _trained(by_pad, 3 * STEPS, pad=V - 1, ended=False, ends=(3, 4, 5)) == []


def test_rows_as_long_as_the_longest_are_not_read_for_their_end() -> None:
    """Texts of one length padded to a multiple of 8: every row as long as the longest, any of
    which may have been cut at the length."""

    def fixed() -> tuple[torch.Tensor, ...]:
        mask = torch.ones(B, T, dtype=torch.long)
        mask[:, 8:] = 0
        ids = torch.randint(1, V - 1, (B, T)).masked_fill(mask == 0, V - 1)
        return ids, (mask,), mask, ids.masked_fill(mask == 0, -100)

    assert _steps(fixed) == []


def test_end_tokens_taught_inside_packed_rows_are_an_end() -> None:
    """Left-padded rows of packed texts, cut mid-text at the row's end: their last ids vary,
    but the end tokens between the texts are targets."""

    def packed() -> tuple[torch.Tensor, ...]:
        ids, mask = _batch(left=True, pad=END, ended=False)
        ids[:, -3] = END  # (a text ends, the next begins, in every row)
        return ids, (mask,), mask, ids.masked_fill(mask == 0, -100)

    assert _steps(packed) == []


def test_token_type_ids_given_before_the_mask_are_not_read_as_it() -> None:
    """0 on a prompt's first position, 1 elsewhere: one position of 'padding' in every row."""

    def typed() -> tuple[torch.Tensor, ...]:
        ids, mask = _batch(pad=V - 1, ended=False)
        types = torch.ones_like(mask)
        types[:, 0] = 0
        return ids, (types, mask), mask, ids.masked_fill(mask == 0, -100)

    assert [f.code for f in _steps(typed, STEPS)] == ["end-token-missing"]
