"""Clean: models trained on next tokens, each with its future hidden, and models whose targets
are not the next token, trained on every step: a GPT by hand (scores filled above the diagonal),
scaled_dot_product_attention with is_causal=True, nn.TransformerEncoder given a causal mask, an
LSTM; a seq2seq nn.Transformer whose source is as long as its target (its cross-attention sees
the whole source); a prefix language model (a bidirectional prefix, targets after it); a masked
language model (bidirectional, targets at masked positions only); a bidirectional LSTM tagger."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
VOCAB, LENGTH, D, MASK = 24, 16, 32, 1
text = torch.randint(2, VOCAB, (8000,))
text[2::2] = (text[1:-1:2] * 3 + 1) % (VOCAB - 2) + 2


def windows(size=8):
    starts = torch.randint(0, len(text) - LENGTH - 1, (size,))
    x = torch.stack([text[i : i + LENGTH] for i in starts])
    return x, torch.stack([text[i + 1 : i + LENGTH + 1] for i in starts])


class HandCausal(nn.Module):
    def __init__(self, fused=False):
        super().__init__()
        self.fused = fused
        self.embed = nn.Embedding(VOCAB, D)
        self.qkv = nn.Linear(D, 3 * D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        x = self.embed(ids)
        q, k, v = self.qkv(x).chunk(3, -1)  # [B, T, D] each
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            t = ids.shape[1]
            scores = (q @ k.transpose(1, 2) / math.sqrt(D)).masked_fill(
                torch.ones(t, t).tril() == 0, float("-inf")
            )
            y = scores.softmax(-1) @ v
        return self.head(x + y)


class EncoderLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        layer = nn.TransformerEncoderLayer(D, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        causal = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        return self.head(self.encoder(self.embed(ids), mask=causal, is_causal=True))


class RecurrentLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.rnn = nn.LSTM(D, D, batch_first=True)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        return self.head(self.rnn(self.embed(ids))[0])


class Translator(nn.Module):
    """Reverses its source; source and target both LENGTH long."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.transformer = nn.Transformer(D, 4, 1, 1, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, source, target_in):
        causal = nn.Transformer.generate_square_subsequent_mask(target_in.shape[1])
        h = self.transformer(self.embed(source), self.embed(target_in), tgt_mask=causal)
        return self.head(h)


class PrefixLM(HandCausal):
    """The first half attends both ways; targets only after it."""

    def forward(self, ids):
        x = self.embed(ids)
        q, k, v = self.qkv(x).chunk(3, -1)
        t = ids.shape[1]
        allowed = torch.ones(t, t).tril().bool()
        allowed[:, : t // 2] = True
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.head(x + y)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.rnn = nn.LSTM(D, D // 2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(D, 2)

    def forward(self, ids):
        return self.head(self.rnn(self.embed(ids))[0])


hand, fused, encoder, recurrent = HandCausal(), HandCausal(fused=True), EncoderLM(), RecurrentLM()
translator, prefix, masked, tagger = Translator(), PrefixLM(), EncoderLM(), Tagger()
models = [hand, fused, encoder, recurrent, translator, prefix, masked, tagger]
opt = torch.optim.Adam([p for m in models for p in m.parameters()], lr=3e-3)


def lm_loss(model, x, y):
    return F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))


for step in range(90):
    x, y = windows()
    loss = lm_loss(hand, x, y) + lm_loss(fused, x, y) + lm_loss(encoder, x, y)
    loss = loss + lm_loss(recurrent, x, y)
    reversed_x = x.flip(1)
    target_in = torch.cat([torch.zeros_like(x[:, :1]), reversed_x[:, :-1]], 1)  # a start id 0
    translated = translator(x, target_in).reshape(-1, VOCAB)
    loss = loss + F.cross_entropy(translated, reversed_x.reshape(-1))
    prefix_y = y.clone()
    prefix_y[:, : LENGTH // 2] = -100
    loss = loss + lm_loss(prefix, x, prefix_y)
    hidden = torch.rand(x.shape) < 0.15
    masked_targets = torch.where(hidden, x, -100)
    mlm = F.cross_entropy(
        masked.head(masked.encoder(masked.embed(x.masked_fill(hidden, MASK)))).reshape(-1, VOCAB),
        masked_targets.reshape(-1),
    )
    tags = F.cross_entropy(tagger(x).reshape(-1, 2), (x % 2).reshape(-1))
    loss = loss + mlm + tags
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 30 == 0:
        print(f"step {step} loss {loss.item():.3f}")
