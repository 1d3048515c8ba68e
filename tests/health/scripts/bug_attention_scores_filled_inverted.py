"""Bug: attention written by hand, as in The Annotated Transformer, fills the scores where the
mask is 1 (``mask == 1``) instead of where it is 0: with ``mask = (tokens != PAD)`` every token's
softmax runs over the padding alone. Nothing fails; the label (the token just after the marker)
needs attention and stays near chance."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
PAD, MARK, VOCAB, LENGTH, D = 0, 1, 12, 16, 32


def batch(size=32):
    tokens = torch.full((size, LENGTH), PAD)
    labels = torch.zeros(size, dtype=torch.long)
    for row in range(size):
        n = int(torch.randint(5, LENGTH - 3, ()))
        words = torch.randint(2, VOCAB, (n,))
        at = int(torch.randint(0, n - 1, ()))
        words[at] = MARK
        tokens[row, :n] = words
        labels[row] = words[at + 1] - 2
    return tokens, labels


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)

    def forward(self, x, mask):  # x [B, S, D], mask [B, 1, S]: 1 for tokens
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(1, 2) / math.sqrt(D)  # [B, S, S]
        scores = scores.masked_fill(mask == 1, -1e9)  # bug: fills the tokens, not the padding
        return x + scores.softmax(-1) @ v


class Reader(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.position = nn.Embedding(LENGTH, D)
        self.attention = Attention()
        self.out = nn.Linear(D, VOCAB - 2)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        h = self.attention(x, (tokens != PAD)[:, None, :])
        marked = (tokens == MARK).float()[..., None]
        return self.out((h * marked).sum(1))


model = Reader()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _step in range(60):
    tokens, labels = batch()
    loss = F.cross_entropy(model(tokens), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"last loss {loss.item():.3f} (chance {math.log(VOCAB - 2):.3f})")
