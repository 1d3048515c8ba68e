"""Bug: a GPT written by hand, its causal mask in place, trained on targets that are its input
ids themselves (``y = x``, where the ids one position on were meant). Each position is taught
to repeat the token it reads: the loss falls to 0.014 in 60 steps, and the model predicts the
next token right nowhere, 0.00 of the positions where the text decides it (the fixed script,
trained on the shifted ids: 1.00 there, its loss 2.56, the text's half random tokens)."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
VOCAB, LENGTH, D = 40, 32, 48
text = torch.randint(0, VOCAB, (20000,))
text[2::2] = (text[1:-1:2] * 3 + 1) % VOCAB  # every other token follows from the one before


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):  # [B, T, D]
        b, t, _ = x.shape
        q, k, v = (
            h.view(b, t, 4, D // 4).transpose(1, 2) for h in self.qkv(self.norm(x)).chunk(3, -1)
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // 4)  # [B, 4, T, T]
        scores = scores.masked_fill(torch.ones(t, t).tril() == 0, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return x + self.proj(y.transpose(1, 2).reshape(b, t, D))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.position = nn.Embedding(LENGTH, D)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        return self.head(self.blocks(self.embed(ids) + self.position(torch.arange(ids.shape[1]))))


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for _step in range(60):
    starts = torch.randint(0, len(text) - LENGTH - 1, (16,))
    x = torch.stack([text[i : i + LENGTH] for i in starts])
    y = x  # bug: the targets are text[i + 1 : i + LENGTH + 1], the ids one position on
    loss = F.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"last loss {loss.item():.3f}")
with torch.no_grad():  # each next token predicted, where the text decides it
    starts = torch.randint(0, len(text) - LENGTH - 1, (64,))
    x = torch.stack([text[i : i + LENGTH] for i in starts])
    y = torch.stack([text[i + 1 : i + LENGTH + 1] for i in starts])
    decided = (starts[:, None] + torch.arange(LENGTH)) % 2 == 1  # y is text[even >= 2]
    right = (model(x).argmax(-1) == y)[decided].float().mean()
print(f"next-token accuracy where the text decides it: {right:.2f}")
