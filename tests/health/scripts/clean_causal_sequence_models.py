"""Clean: language models whose positions read no later token, trained on next tokens, that
an attention read or a gradient could take for leaks: a Temporal Convolutional Network padded
on both sides whose outputs are trimmed at the right end (the reference TCN's ``Chomp1d``); a
causal convolution with batch norm over time, in batches of 4 sequences of 16 tokens (the
batch's statistics carry a little of every token to every position: 0.04 of the largest
gradient at the next token); attention whose causal mask is applied after the softmax and the
weights renormalised (the scores read as unmasked); ELMo's two directions in one bidirectional
LSTM, the forward half alone predicting the next token; and a text VAE, whose latent reads the
whole sentence on purpose, its KL term beside the cross-entropy."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
VOCAB, LENGTH, D = 24, 16, 32
text = torch.randint(0, VOCAB, (8000,))
text[2::2] = (text[1:-1:2] * 3 + 1) % VOCAB  # every other token follows from the one before


def windows(size):
    starts = torch.randint(0, len(text) - LENGTH - 1, (size,))
    x = torch.stack([text[i : i + LENGTH] for i in starts])
    return x, torch.stack([text[i + 1 : i + LENGTH + 1] for i in starts])


class Chomped(nn.Module):
    """Padded (k - 1) * d on both sides, the last (k - 1) * d outputs trimmed."""

    def __init__(self, norm=False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.convs = nn.ModuleList(nn.Conv1d(D, D, 3, padding=2 * d, dilation=d) for d in (1, 2))
        self.norms = nn.ModuleList(nn.BatchNorm1d(D) if norm else nn.Identity() for _ in (1, 2))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):  # [B, T] -> [B, T, VOCAB]
        h = self.embed(ids).transpose(1, 2)  # [B, D, T]
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = h + torch.relu(norm(conv(h)[..., : -conv.padding[0]]))
        return self.head(h.transpose(1, 2))


class MaskedAfter(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.position = nn.Embedding(LENGTH, D)
        self.qkv = nn.Linear(D, 3 * D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        h = self.embed(ids) + self.position(torch.arange(ids.shape[1]))  # [B, T, D]
        q, k, v = self.qkv(h).chunk(3, -1)
        weights = F.softmax(q @ k.transpose(1, 2) / D**0.5, dim=-1)  # [B, T, T]
        weights = weights * torch.ones(ids.shape[1], ids.shape[1]).tril()
        weights = weights / weights.sum(-1, keepdim=True)
        return self.head(h + weights @ v)


class ELMo(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.rnn = nn.LSTM(D, D, batch_first=True, bidirectional=True)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        return self.head(self.rnn(self.embed(ids))[0][..., :D])  # the forward direction's


class TextVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.encoder = nn.GRU(D, D, batch_first=True)
        self.latent = nn.Linear(D, 16)  # mean and log-variance of 8 dims
        self.decoder = nn.GRU(D + 8, D, batch_first=True)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        e = self.embed(ids)  # [B, T, D]
        mean, log_var = self.latent(self.encoder(e)[1][-1]).chunk(2, -1)  # [B, 8] each
        z = mean + torch.randn_like(mean) * (0.5 * log_var).exp()
        kl = 0.5 * (mean.square() + log_var.exp() - 1 - log_var).sum(-1).mean()
        z = z[:, None].expand(-1, ids.shape[1], -1)
        return self.head(self.decoder(torch.cat([e, z], -1))[0]), kl


chomped, normed, after, elmo, vae = Chomped(), Chomped(norm=True), MaskedAfter(), ELMo(), TextVAE()
models = [chomped, normed, after, elmo, vae]
opt = torch.optim.Adam([p for m in models for p in m.parameters()], lr=3e-3)


def lm_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


for step in range(90):
    x, y = windows(16)
    loss = lm_loss(chomped(x), y) + lm_loss(after(x), y) + lm_loss(elmo(x), y)
    small_x, small_y = windows(4)
    loss = loss + lm_loss(normed(small_x), small_y)
    logits, kl = vae(x)
    loss = loss + lm_loss(logits, y) + 0.1 * kl
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 30 == 0:
        print(f"step {step} loss {loss.item():.3f}")
