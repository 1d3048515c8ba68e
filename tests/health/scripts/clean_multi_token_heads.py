"""Clean: a GPT written by hand with heads for the tokens after the next (multi-token
prediction): a head for token t + 2 trained beside the next-token head, their losses summed
(the t + 2 one first, over targets rolled two on and padded with -100). Trained on the ids two
on by design, as a term of the loss, not the loss itself."""

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
        self.head = nn.Linear(D, VOCAB)  # token t + 1
        self.ahead = nn.Linear(D, VOCAB)  # token t + 2

    def forward(self, ids):
        h = self.blocks(self.embed(ids) + self.position(torch.arange(ids.shape[1])))
        return self.head(h), self.ahead(h)  # [B, T, VOCAB] each


def shifted(ids, k):
    """[B, T]: the id k positions on, -100 past the end."""
    return torch.cat([ids[:, k:], torch.full((ids.shape[0], k), -100)], 1)


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for _step in range(100):
    starts = torch.randint(0, len(text) - LENGTH - 1, (16,))
    x = torch.stack([text[i : i + LENGTH] for i in starts])
    logits, ahead = model(x)
    loss_ahead = F.cross_entropy(ahead.reshape(-1, VOCAB), shifted(x, 2).reshape(-1))
    loss_next = F.cross_entropy(logits.reshape(-1, VOCAB), shifted(x, 1).reshape(-1))
    loss = loss_next + 0.5 * loss_ahead
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"next-token loss {loss_next.item():.3f}, token-after-next loss {loss_ahead.item():.3f}")
