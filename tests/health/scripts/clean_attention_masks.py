"""Clean: attention masks in the forms models use them, each right, trained on every step:
nn.TransformerEncoder given src_key_padding_mask = tokens == PAD; a left-padded causal decoder
whose boolean scaled_dot_product_attention mask is True for tokens; an additive mask from a
Hugging Face style attention_mask (1 for tokens) given to the model; a cross-attention that
opens a fixed block of memory slots alone; a series of vectors padded with zeros, masked from
its lengths."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
PAD, MEMORY, VOCAB, LENGTH, D = 0, 3, 30, 16, 32


def lengths(size=16):
    return torch.randint(4, LENGTH - 2, (size,))


def right_padded(n):
    """[B, LENGTH] tokens, padded after each row's n words; labels: the first word is odd."""
    tokens = torch.full((len(n), LENGTH), PAD)
    for row, k in enumerate(n.tolist()):
        tokens[row, :k] = torch.randint(4, VOCAB, (k,))
    return tokens, tokens[:, 0] % 2


def attend(q, k, v, mask):
    """[B, S, D] through one head of scaled_dot_product_attention; mask [B, 1, L, S]."""
    return F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask)[:, 0]


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        layer = nn.TransformerEncoderLayer(D, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.out = nn.Linear(D, 2)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=tokens == PAD)
        return self.out(h[:, 0])


class LeftPaddedDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, 2)

    def forward(self, tokens):
        s = tokens.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        mask = causal & (tokens != PAD)[:, None, :]  # [B, L, S]: True takes part
        mask |= torch.eye(s, dtype=torch.bool)  # a padding query sees itself (no empty row)
        q, k, v = self.qkv(self.embed(tokens)).chunk(3, -1)
        return self.out(attend(q, k, v, mask[:, None])[:, -1])


class AdditiveMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, 2)

    def forward(self, tokens, attention_mask):
        bias = (1.0 - attention_mask[:, None, None, :].float()) * -1e9  # [B, 1, 1, S]
        q, k, v = self.qkv(self.embed(tokens)).chunk(3, -1)
        return self.out(attend(q, k, v, bias)[:, 0])


class MemoryReader(nn.Module):
    """Tokens, padding, then 4 memory slots; the cross-attention reads the slots alone."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.slots = nn.Parameter(torch.randn(4, D) * 0.1)
        self.attention = nn.MultiheadAttention(D, 4, batch_first=True)
        self.out = nn.Linear(D, 2)

    def forward(self, tokens):
        x = self.embed(tokens)
        x = torch.cat([x[:, :-4], x[:, -4:] + self.slots], 1)
        h, _ = self.attention(x, x, x, key_padding_mask=tokens != MEMORY)  # slots alone
        return self.out(h[:, 0] + x[:, 0])


class SeriesEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(4, 2, batch_first=True)
        self.out = nn.Linear(4, 1)

    def forward(self, series, n):
        ignored = torch.arange(series.shape[1]) >= n[:, None]  # [B, S]: past each row's end
        h, _ = self.attention(series, series, series, key_padding_mask=ignored)
        keep = (~ignored).float()[..., None]
        return self.out((h * keep).sum(1) / keep.sum(1))[:, 0]


encoder, decoder, additive = Encoder(), LeftPaddedDecoder(), AdditiveMask()
memory, series_model = MemoryReader(), SeriesEncoder()
models = [encoder, decoder, additive, memory, series_model]
opt = torch.optim.Adam([p for m in models for p in m.parameters()], lr=3e-3)
for step in range(90):
    n = lengths()
    tokens, labels = right_padded(n)
    left = torch.stack([row.roll(int(LENGTH - k)) for row, k in zip(tokens, n, strict=True)])
    with_memory = torch.cat([tokens[:, :-4], torch.full((len(n), 4), MEMORY)], 1)
    series = torch.randn(len(n), LENGTH, 4) * (torch.arange(LENGTH) < n[:, None])[..., None]
    target = series.sum((1, 2))
    loss = (
        F.cross_entropy(encoder(tokens), labels)
        + F.cross_entropy(decoder(left), left[:, -1] % 2)
        + F.cross_entropy(additive(tokens, (tokens != PAD).long()), labels)
        + F.cross_entropy(memory(with_memory), labels)
        + F.mse_loss(series_model(series, n), target) * 0.01
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 30 == 0:
        print(f"step {step} loss {loss.item():.3f}")
