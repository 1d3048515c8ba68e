"""Clean: token models whose targets are their input ids at the same positions, on purpose.
A causal model that puts a BOS before its ids itself (position t reads BOS and the ids before
t, and predicts id t); a bidirectional encoder trained to reconstruct its tokens; a denoiser
whose inputs have a tenth of their tokens replaced, scored on every position. None is a
language model trained on its own ids (``targets-not-shifted``)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
VOCAB, LENGTH, D, BOS = 32, 24, 32, 32
following = (5 * torch.arange(VOCAB) + 3) % VOCAB  # each token's usual successor


def sequences(n):  # [n, LENGTH]: a Markov chain, the usual successor 9 times in 10
    ids = torch.empty(n, LENGTH, dtype=torch.long)
    ids[:, 0] = torch.randint(0, VOCAB, (n,))
    for t in range(1, LENGTH):
        usual = torch.rand(n) < 0.9
        ids[:, t] = torch.where(usual, following[ids[:, t - 1]], torch.randint(0, VOCAB, (n,)))
    return ids


class Block(nn.Module):
    def __init__(self, causal):
        super().__init__()
        self.causal = causal
        self.norm, self.qkv, self.out = nn.LayerNorm(D), nn.Linear(D, 3 * D), nn.Linear(D, D)

    def forward(self, x):  # [B, T, D]
        b, t, _ = x.shape
        q, k, v = (
            h.view(b, t, 4, D // 4).transpose(1, 2) for h in self.qkv(self.norm(x)).chunk(3, -1)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # [B, 4, T, D / 4]
        return x + self.out(y.transpose(1, 2).reshape(b, t, D))


class TokenModel(nn.Module):
    def __init__(self, causal, shift):
        super().__init__()
        self.shift = shift
        self.embed, self.position = nn.Embedding(VOCAB + 1, D), nn.Embedding(LENGTH, D)
        self.blocks = nn.Sequential(Block(causal), Block(causal))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):  # [B, T] -> [B, T, VOCAB]
        if self.shift:  # BOS, then the ids but the last: logits[:, t] predict ids[:, t]
            ids = torch.cat([torch.full_like(ids[:, :1], BOS), ids[:, :-1]], 1)
        x = self.embed(ids) + self.position(torch.arange(ids.shape[1]))
        return self.head(self.blocks(x))


def train(model, corrupt=0.0, steps=90):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _step in range(steps):
        ids = sequences(32)
        noisy = torch.where(torch.rand(ids.shape) < corrupt, torch.randint_like(ids, VOCAB), ids)
        loss = F.cross_entropy(model(noisy).reshape(-1, VOCAB), ids.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


print(f"BOS put before its ids inside: {train(TokenModel(causal=True, shift=True)):.3f}")
print(f"bidirectional reconstruction: {train(TokenModel(causal=False, shift=False)):.3f}")
print(f"denoiser, a tenth replaced: {train(TokenModel(causal=False, shift=False), 0.1):.3f}")
