"""Clean: a small pre-norm transformer encoder stack with residuals (repeated blocks), its
attention dropout on in training and off in the evaluations (nn.MultiheadAttention with
dropout=0.1, and a hand-written attention that passes dropout_p only in training)."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, dropout=0.1, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        q, k, v = self.qkv(h).chunk(3, dim=-1)  # [B, T, d] each
        x = x + F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        return x + self.ffn(self.norm2(x))


class Encoder(nn.Module):
    def __init__(self, vocab=50, d=32, n=4, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(16, d) / math.sqrt(d))
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(1))


model = Encoder()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(80):
    tokens = torch.randint(0, 50, (16, 16))
    loss = nn.functional.cross_entropy(model(tokens), tokens[:, 0] % 4)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 40 == 39:
        model.eval()
        with torch.no_grad():
            accuracy = (model(tokens).argmax(1) == tokens[:, 0] % 4).float().mean()
        model.train()
print("final loss", round(loss.item(), 3))
