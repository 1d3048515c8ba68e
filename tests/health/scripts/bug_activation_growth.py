"""Bug: every encoder block multiplies its input by sqrt(d) before adding the position signal."""

import math

import torch
from torch import nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d
        self.conv = nn.Conv1d(d, d, 5, padding=2, groups=d)
        self.ffn = nn.Linear(d, d)

    def forward(self, x):  # x [B, L, D]
        x = x * math.sqrt(
            self.d
        )  # bug: the scaling belongs once at the embedding, not in each block
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        return x + self.ffn(x)


class Model(nn.Module):
    def __init__(self, d=64, n=5):
        super().__init__()
        self.embed = nn.Embedding(100, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.out = nn.Linear(d, 2)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.out(x.mean(1))


model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(6):
    tokens = torch.randint(0, 100, (8, 20))
    loss = nn.functional.cross_entropy(model(tokens), tokens[:, 0] % 2)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())
