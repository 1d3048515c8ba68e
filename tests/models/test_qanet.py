"""QANet on tiny random configs: shapes, masks, gradients, the trilinear trick, decoding, EMA."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from treeqa.data.qa_batch import QABatch
from treeqa.models.qanet import (
    NEG,
    BlockMask,
    ContextQueryAttention,
    QANet,
    QANetConfig,
    encoder_stack,
    span_loss,
)
from treeqa.models.qanet_naive import MaterialisedCQAttention, NaiveQANet
from treeqa.models.spans import best_spans, decode
from treeqa.train.ema import EMA
from treeqa.train.loop import TrainState

TINY = QANetConfig(
    d_model=16,
    heads=2,
    word_dim=12,
    char_dim=8,
    emb_convs=2,
    model_blocks=2,
    model_convs=1,
    dropout=0.0,
    char_dropout=0.0,
    survival=1.0,
)
VOCAB, CHARS, W = 50, 20, 5


def make_batch(lengths: list[int], qlengths: list[int], seed: int = 0) -> QABatch:
    g = torch.Generator().manual_seed(seed)
    b, length, qlength = len(lengths), max(lengths), max(qlengths)
    cw = torch.randint(1, VOCAB, (b, length), generator=g)
    qw = torch.randint(1, VOCAB, (b, qlength), generator=g)
    cw[:, 0] = 1  # an out-of-vocabulary word in every context
    cc = torch.randint(1, CHARS, (b, length, W), generator=g)
    qc = torch.randint(1, CHARS, (b, qlength, W), generator=g)
    for i, (n, m) in enumerate(zip(lengths, qlengths, strict=True)):
        cw[i, n:], cc[i, n:], qw[i, m:], qc[i, m:] = 0, 0, 0, 0
    starts = torch.tensor([min(1, n - 1) for n in lengths])
    ends = torch.tensor([min(3, n - 1) for n in lengths])
    return QABatch(cw, cc, qw, qc, starts, ends, torch.arange(b))


def model(config: QANetConfig = TINY, seed: int = 0) -> QANet:
    torch.manual_seed(seed)
    return QANet(config, VOCAB, CHARS, torch.randn(VOCAB, config.word_dim))


def test_shapes_and_padding_masked() -> None:
    batch = make_batch([9, 6, 4], [5, 3, 2])
    out = model().eval()(batch)
    assert out.logits.shape == (3, 2, 9)
    assert out.logits.dtype == torch.float32
    assert bool((out.logits[1, :, 6:] == NEG).all()) and bool((out.logits[1, :, :6] > NEG).all())
    assert torch.isfinite(out.logits).all() and out.loss is not None and out.loss.ndim == 0


def test_batched_equals_one_at_a_time() -> None:
    net = model().eval()
    batch = make_batch([9, 6, 4], [5, 3, 2])
    together = net(batch).logits
    for i, (n, m) in enumerate([(9, 5), (6, 3), (4, 2)]):
        one = QABatch(
            batch.context_words[i : i + 1, :n],
            batch.context_chars[i : i + 1, :n],
            batch.question_words[i : i + 1, :m],
            batch.question_chars[i : i + 1, :m],
            batch.starts[i : i + 1],
            batch.ends[i : i + 1],
            batch.index[i : i + 1],
        )
        torch.testing.assert_close(net(one).logits[0], together[i, :, :n], atol=1e-5, rtol=1e-4)


def test_padding_every_row_further_changes_no_logit_nor_the_loss() -> None:
    """``data.pad_multiple`` pads even a batch's longest context and question: fixed shapes
    for CUDA graphs must not change what the model computes."""
    net = model().eval()
    batch = make_batch([9, 6, 4], [5, 3, 2])

    def pad(x: torch.Tensor, to: int) -> torch.Tensor:  # [B, L, ...] -> [B, to, ...] with 0
        return torch.nn.functional.pad(x, [0, 0] * (x.dim() - 2) + [0, to - x.shape[1]])

    padded = dataclasses.replace(
        batch,
        context_words=pad(batch.context_words, 16),
        context_chars=pad(batch.context_chars, 16),
        question_words=pad(batch.question_words, 8),
        question_chars=pad(batch.question_chars, 8),
    )
    before, after = net(batch), net(padded)
    assert after.logits.shape == (3, 2, 16) and bool((after.logits[:, :, 9:] == NEG).all())
    torch.testing.assert_close(after.logits[:, :, :9], before.logits, atol=1e-5, rtol=1e-4)
    assert before.loss is not None and after.loss is not None
    torch.testing.assert_close(after.loss, before.loss, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("no_answer", [False, True])
def test_gradient_reaches_every_trainable_parameter(no_answer: bool) -> None:
    net = model(dataclasses.replace(TINY, no_answer=no_answer)).train()
    batch = make_batch([9, 6], [5, 3])
    out = net(batch)
    assert out.loss is not None
    out.loss.backward()
    missing = [
        n
        for n, p in net.named_parameters()
        if p.requires_grad and (p.grad is None or p.grad.abs().sum() == 0)
    ]
    assert not missing
    assert "embedding.word_vectors" not in dict(net.named_parameters())  # fixed: a buffer
    assert net.embedding.word_oov.requires_grad


def test_oov_row_is_the_only_trainable_word_vector() -> None:
    net = model()
    words = torch.tensor([[1, 2, 1]])
    chars = torch.ones(1, 3, W, dtype=torch.long)
    x = F.embedding(words, net.embedding.word_vectors)
    assert not torch.equal(x[0, 0], net.embedding.word_oov.detach())
    emb = net.embedding.eval()
    # A changed OOV vector changes the output at exactly the OOV positions.
    before = emb(words, chars)
    with torch.no_grad():
        net.embedding.word_oov.add_(1.0)
    after = emb(words, chars)
    changed = (before - after).abs().sum(2)[0] > 0
    assert changed.tolist() == [True, False, True]


def test_trilinear_equals_materialised() -> None:
    torch.manual_seed(0)
    fast, naive = ContextQueryAttention(16, 0.0), MaterialisedCQAttention(16, 0.0)
    naive.load_state_dict(fast.state_dict())
    c, q = torch.randn(3, 11, 16), torch.randn(3, 7, 16)
    torch.testing.assert_close(fast.similarity(c, q), naive.similarity(c, q), atol=1e-5, rtol=1e-5)
    cm = torch.ones(3, 11, dtype=torch.bool)
    qm = torch.ones(3, 7, dtype=torch.bool)
    cm[1, 8:], qm[2, 4:] = False, False
    torch.testing.assert_close(fast(c, q, cm, qm), naive(c, q, cm, qm), atol=1e-5, rtol=1e-5)
    # Q2C through S1 (S2^T c) equals the paper's (S1 S2^T) c.
    s = fast.similarity(c, q)
    s1 = s.masked_fill(~qm[:, None], NEG).softmax(2)
    s2 = s.masked_fill(~cm[:, :, None], NEG).softmax(1)
    torch.testing.assert_close(fast(c, q, cm, qm)[..., 48:], c * ((s1 @ s2.transpose(1, 2)) @ c))


def test_naive_model_same_shapes() -> None:
    torch.manual_seed(0)
    net = NaiveQANet(TINY, VOCAB, CHARS).eval()
    assert net(make_batch([9, 6], [5, 3])).logits.shape == (2, 2, 9)


def test_no_sqrt_d_scaling_activations_stay_flat() -> None:
    config = dataclasses.replace(QANetConfig(), model_blocks=7, dropout=0.0, survival=1.0)
    torch.manual_seed(0)
    blocks = encoder_stack(config, 7, 2, 5).eval()
    x = torch.randn(2, 40, config.d_model)
    mask = BlockMask.of(torch.ones(2, 40, dtype=torch.bool))
    rms = []
    with torch.no_grad():
        for block in blocks:
            x = block(x, mask)
            rms.append(float(x.pow(2).mean().sqrt()))
    # Each block adds a bounded amount (position signal + sublayer outputs) to the residual
    # stream: growth is additive, ~linear in depth. A sqrt(128) scale per block gives ~11^7.
    steps = [b - a for a, b in zip(rms, rms[1:], strict=False)]
    assert max(steps) < 1.5 and rms[-1] < 2 * len(rms), rms


def test_loss_is_cross_entropy_on_raw_logits() -> None:
    net = model().eval()
    batch = make_batch([9, 6], [5, 3])
    out = net(batch)
    assert out.loss is not None
    expected = F.cross_entropy(out.logits[:, 0], batch.starts) + F.cross_entropy(
        out.logits[:, 1], batch.ends
    )
    torch.testing.assert_close(out.loss, expected)
    assert bool(
        (out.logits[:, :, :6] < 0).any() or (out.logits[:, :, :6] > 1).any()
    )  # not probabilities
    unlabelled = dataclasses.replace(
        batch, starts=torch.tensor([-1, -1]), ends=torch.tensor([-1, -1])
    )
    assert net(unlabelled).loss is None


@pytest.mark.parametrize("max_len", [1, 4, 30])
@pytest.mark.parametrize("ties", [False, True])
def test_best_spans_matches_brute_force(max_len: int, ties: bool) -> None:
    g = torch.Generator().manual_seed(3)
    s, e = torch.randn(6, 13, generator=g), torch.randn(6, 13, generator=g)
    if ties:  # many equal scores: the first span in (start, end) order wins
        s, e = s.round(), e.round()
    mask = torch.ones(6, 13, dtype=torch.bool)
    mask[2, 7:], mask[4, 1:] = False, False
    start, end, score = best_spans(s, e, mask, max_len=max_len)
    for b in range(6):
        n = int(mask[b].sum())
        cands = [
            (-float(s[b, i] + e[b, j]), i, j)
            for i in range(n)
            for j in range(i, min(n, i + max_len))
        ]
        best = min(cands)
        assert (int(start[b]), int(end[b])) == best[1:]
        assert float(score[b]) == pytest.approx(-best[0], abs=1e-5)


def test_best_spans_of_a_long_context_score_only_the_band() -> None:
    length = 200_000  # a dense [L, L] score table would take 160 GB
    s, e = torch.zeros(1, length), torch.zeros(1, length)
    s[0, 150_000], e[0, 150_010] = 5.0, 4.0
    start, end, score = best_spans(s, e, torch.ones(1, length, dtype=torch.bool), max_len=30)
    assert (int(start), int(end), float(score)) == (150_000, 150_010, 9.0)


def test_no_answer_slot_trains_and_decodes() -> None:
    config = dataclasses.replace(TINY, no_answer=True)
    net = model(config).eval()
    batch = make_batch([9, 6], [5, 3])
    batch = dataclasses.replace(batch, starts=torch.tensor([2, -1]), ends=torch.tensor([4, -1]))
    out = net(batch)
    assert out.logits.shape == (2, 2, 10)
    assert bool((out.logits[1, :, 9] > NEG).all())  # the slot is never masked
    assert out.loss is not None
    expected = F.cross_entropy(out.logits[:, 0], torch.tensor([2, 9])) + F.cross_entropy(
        out.logits[:, 1], torch.tensor([4, 9])
    )
    torch.testing.assert_close(out.loss, expected)
    # Decoding: the slot wins exactly when its score beats the best span's.
    logits = torch.full((2, 2, 5), -5.0)
    logits[:, :, 1] = 2.0  # span (1, 1) scores 4 before normalisation
    logits[0, :, 4], logits[1, :, 4] = 3.0, 1.0  # no-answer slot: 6 for row 0, 2 for row 1
    mask = torch.ones(2, 4, dtype=torch.bool)
    start, end, score, margin = decode(logits, mask, 30, no_answer=True)
    assert start.tolist() == [-1, 1] and end.tolist() == [-1, 1]
    torch.testing.assert_close(margin, torch.tensor([2.0, -2.0]))  # 6 - 4 and 2 - 4
    assert decode(logits, mask, 30, no_answer=True, threshold=5.0).start.tolist() == [1, 1]
    assert decode(logits, mask, 30, no_answer=False).no_answer_margin.isinf().all()


def test_v1_rows_without_answer_are_ignored() -> None:
    logits = torch.randn(3, 2, 6)
    starts, ends = torch.tensor([1, -1, 2]), torch.tensor([2, -1, 9])  # 9: past the context
    loss = span_loss(logits, starts, ends, no_answer=False)
    expected = F.cross_entropy(logits[:1, 0], starts[:1]) + F.cross_entropy(logits[:1, 1], ends[:1])
    assert loss is not None
    torch.testing.assert_close(loss, expected)


def test_attention_dropout_defaults_to_dropout_and_can_be_switched_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[float] = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args: Any, dropout_p: float = 0.0, **kwargs: Any) -> torch.Tensor:
        seen.append(dropout_p)
        return sdpa(*args, dropout_p=dropout_p, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    batch = make_batch([9, 6], [5, 3])
    for attention_dropout, expected in ((None, 0.1), (0.0, 0.0), (0.3, 0.3)):
        net = model(dataclasses.replace(TINY, dropout=0.1, attention_dropout=attention_dropout))
        seen.clear()
        net.train()(batch)
        assert seen and set(seen) == {expected}
        seen.clear()
        net.eval()(batch)
        assert seen and set(seen) == {0.0}  # never in evaluation
    with pytest.raises(ValueError, match="attention_dropout"):
        model(dataclasses.replace(TINY, attention_dropout=1.0))


def test_stochastic_depth_skips_and_rescales() -> None:
    config = dataclasses.replace(TINY, survival=0.5)
    blocks = encoder_stack(config, 2, 1, 3)
    assert blocks[0].survival[0] == pytest.approx(1 - 1 / 6 * 0.5)
    assert blocks[-1].survival[-1] == pytest.approx(0.5)
    x, mask = torch.randn(2, 5, 16), BlockMask.of(torch.ones(2, 5, dtype=torch.bool))
    blocks.eval()
    torch.manual_seed(0)
    a = blocks[1](x, mask)
    torch.manual_seed(1)
    torch.testing.assert_close(a, blocks[1](x, mask))  # deterministic at evaluation
    blocks.train()
    with torch.no_grad():
        outs = {round(float(blocks[1](x, mask).sum()), 4) for _ in range(30)}
    assert len(outs) > 1  # random sublayer drops in training


def test_compile_path_equals_eager_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torch.compile stochastic depth multiplies by a 0/1 draw instead of branching on
    the host, and the loss skips its labels check. Run eagerly with ``is_compiling`` forced,
    the same seed draws the same survivals (both from the CPU generator): same loss, same
    gradients, and a dropped sublayer adds exactly nothing."""
    config = dataclasses.replace(TINY, survival=0.5)  # dropout 0: the draws stay in step
    net, batch = model(config), make_batch([7, 5, 6], [3, 4, 2])
    net.train()

    def loss_and_grads(compiling: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
        net.zero_grad()
        torch.manual_seed(3)
        loss = net(batch).loss
        assert loss is not None
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in net.parameters() if p.grad is not None]

    eager, eager_grads = loss_and_grads(False)
    masked, masked_grads = loss_and_grads(True)
    torch.testing.assert_close(masked, eager)
    assert len(masked_grads) == len(eager_grads)
    for a, b in zip(masked_grads, eager_grads, strict=True):
        torch.testing.assert_close(a, b)


def test_ema_warmup_swap_and_restore() -> None:
    net = torch.nn.Linear(3, 2)
    ema = EMA(decay=0.9999)
    state = TrainState()
    ema.on_fit_start(state, net, torch.optim.SGD(net.parameters(), lr=0.1))
    w0 = net.weight.detach().clone()
    with torch.no_grad():
        net.weight.add_(1.0)
    state.step = 1
    ema.on_step_end(state, None, None)  # type: ignore[arg-type]
    # First update: decay min(0.9999, 1/10) = 0.1 -> shadow = 0.1 w0 + 0.9 (w0 + 1).
    torch.testing.assert_close(ema.shadow["weight"], w0 + 0.9)
    raw = net.weight.detach().clone()
    ema.on_eval_start(state, net)
    torch.testing.assert_close(net.weight.detach(), w0 + 0.9)
    ema.on_eval_end(state, net)
    torch.testing.assert_close(net.weight.detach(), raw)
    best, last = ema.checkpoint_tensors("best"), ema.checkpoint_tensors("last")
    assert set(best) == {"model.weight", "model.bias"} and set(last) == {"ema.weight", "ema.bias"}
    resumed = EMA()
    resumed.load({k[4:]: v for k, v in last.items()})
    resumed.on_fit_start(state, net, torch.optim.SGD(net.parameters(), lr=0.1))
    torch.testing.assert_close(resumed.shadow["weight"], w0 + 0.9)


def test_mask_value_is_bf16_safe() -> None:
    assert torch.tensor(NEG, dtype=torch.bfloat16).isfinite()
    net = model().eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(make_batch([9, 6], [5, 3]))
    assert out.loss is not None and torch.isfinite(out.loss)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_autocast_on_gpu_matches_float32() -> None:
    net = model(dataclasses.replace(TINY, no_answer=True)).cuda().eval()
    batch = make_batch([9, 6, 4], [5, 3, 2]).to("cuda")
    reference = net(batch)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = net(batch)
    assert out.logits.dtype == torch.float32 and out.loss is not None
    assert torch.isfinite(out.loss)
    torch.testing.assert_close(out.logits, reference.logits, atol=0.1, rtol=0.05)
    net.train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = net(batch).loss
    assert loss is not None
    loss.backward()
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all()
        for p in net.parameters()
        if p.requires_grad
    )


def test_sizes_and_dropout_out_of_range_name_the_field() -> None:
    # heads = 0 was a ZeroDivisionError, dropout 1.5 torch's message naming no config key.
    for change, message in (
        ({"heads": 0}, "model.heads: expected at least 1, got 0"),
        ({"d_model": 0}, "model.d_model: expected at least 1, got 0"),
        ({"dropout": 1.5}, "model.dropout: expected less than 1, got 1.5"),
        ({"char_dropout": -0.1}, "model.char_dropout: expected at least 0, got -0.1"),
    ):
        with pytest.raises(ValueError) as err:
            QANet(dataclasses.replace(TINY, **change), VOCAB, CHARS)
        assert str(err.value) == message


def test_paper_config_parameter_count_follows_the_paper_layout() -> None:
    """Every part counted from the paper's widths (README: 2,285,231 besides the char table):
    highway on the 500-d [word; char] vector, then a projection to D; depthwise-separable
    convolutions; Vaswani attention with its output projection."""
    config = QANetConfig()
    e, c, d, chars = config.word_dim, config.char_dim, config.d_model, 90
    net = QANet(config, 1000, chars)

    def linear(n_in: int, n_out: int) -> int:
        return n_in * n_out + n_out

    def separable(width: int, kernel: int) -> int:
        return kernel * width + linear(width, width)

    def block(convs: int, kernel: int) -> int:
        norms = (convs + 2) * 2 * d
        attention = linear(d, 3 * d) + linear(d, d)
        return convs * separable(d, kernel) + norms + attention + 2 * linear(d, d)

    expected = {
        "embedding.word_oov": e,
        "embedding.char_emb": chars * c,
        "embedding.char_cnn": separable(c, config.char_kernel),
        "embedding.highway": config.highway_layers * 2 * linear(e + c, e + c),
        "embedding.project": linear(e + c, d),
        "embedding_encoder": block(config.emb_convs, config.emb_kernel),
        "cq_attention": 3 * d + 1,
        "resize": linear(4 * d, d),
        "model_encoder": config.model_blocks * block(config.model_convs, config.model_kernel),
        "pointer": 2 * linear(2 * d, 1),
    }
    counted = dict.fromkeys(expected, 0)
    for name, p in net.named_parameters():
        counted[next(k for k in expected if f"{name}.".startswith(f"{k}."))] += p.numel()
    assert counted == expected
    assert sum(expected.values()) - expected["embedding.char_emb"] == 2_285_231
