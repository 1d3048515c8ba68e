"""Bug: a GPT written by hand whose loss shifts its targets itself (``logits[:, :-1]`` against
``targets[:, 1:]``, as a transformers causal LM does with ``labels=``), given targets that were
shifted already (``y = text[i + 1 : i + LENGTH + 1]``, where ``x`` itself was meant). Each position
is trained on the token two places on: after 60 steps the model predicts the next token right at
0.02 of the positions where the text decides it (the fixed script, ``model(x, targets=x)``:
1.00 there)."""

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

    def forward(self, ids, targets=None):  # the loss shifts: logits[:, :-1] against targets[:, 1:]
        h = self.blocks(self.embed(ids) + self.position(torch.arange(ids.shape[1])))
        logits = self.head(h)  # [B, T, VOCAB]
        if targets is None:
            return logits
        return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), targets[:, 1:].reshape(-1))


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for _step in range(60):
    starts = torch.randint(0, len(text) - LENGTH - 1, (16,))
    x = torch.stack([text[i : i + LENGTH] for i in starts])
    y = torch.stack([text[i + 1 : i + LENGTH + 1] for i in starts])  # bug: the loss shifts; y = x
    loss = model(x, targets=y)
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
