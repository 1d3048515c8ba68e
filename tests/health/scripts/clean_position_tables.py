"""Clean: position tables added along the positions, every way on every step: the transformer
tutorial's [max_len, 1, D] buffer over time-first [T, B, D] input to time-first layers; a
[1, max_len, D] buffer over batch-first input; the tutorial's buffer transposed for batch-first
input; a learned [1, max_len, D] table (ViT's); the input scaled by sqrt(D) inside the module.
Each model learns where a marker token is; batches come from a DataLoader."""

import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
VOCAB, LENGTH, D, MARKER, LONGEST = 20, 8, 16, 1, 64
WAYS = ("time first", "batch first", "transposed", "learned", "scaled")


def sinusoids(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


class Positions(nn.Module):
    def __init__(self, way):
        super().__init__()
        self.way = way
        self.dropout = nn.Dropout(0.1)
        table = sinusoids(LONGEST, D)
        if way == "learned":
            self.pos_embed = nn.Parameter(table[None] * 0.5)  # [1, max_len, D]
        elif way == "batch first":
            self.register_buffer("pe", table[None])  # [1, max_len, D]
        else:
            self.register_buffer("pe", table[:, None])  # [max_len, 1, D]

    def forward(self, x):
        if self.way == "time first":  # x [T, B, D]
            x = x + self.pe[: x.size(0)]
        elif self.way == "batch first":
            x = x + self.pe[:, : x.size(1)]
        elif self.way == "transposed":
            x = x + self.pe[: x.size(1)].transpose(0, 1)
        elif self.way == "learned":
            x = x + self.pos_embed[:, : x.size(1)]
        else:
            x = x * math.sqrt(D) + self.pe[: x.size(1)].transpose(0, 1)
        return self.dropout(x)


class Locator(nn.Module):
    def __init__(self, way):
        super().__init__()
        self.time_first = way == "time first"
        self.embed = nn.Embedding(VOCAB, D)
        self.position = Positions(way)
        layer = nn.TransformerEncoderLayer(D, 2, 32, batch_first=not self.time_first)
        self.encoder = nn.TransformerEncoder(layer, 1)
        self.out = nn.Linear(D, LENGTH)

    def forward(self, ids):  # ids [B, T]
        if self.time_first:
            h = self.encoder(self.position(self.embed(ids.t())))  # [T, B, D]
            return self.out(h.mean(0))
        return self.out(self.encoder(self.position(self.embed(ids))).mean(1))


ids = torch.randint(MARKER + 1, VOCAB, (2000, LENGTH))
at = torch.randint(0, LENGTH, (2000,))
ids[torch.arange(2000), at] = MARKER
loader = DataLoader(TensorDataset(ids, at), batch_size=32, shuffle=True)
models = nn.ModuleList(Locator(way) for way in WAYS)
opt = torch.optim.Adam(models.parameters(), lr=3e-3)
for _epoch in range(2):
    for batch, target in loader:
        loss = sum(F.cross_entropy(model(batch), target) for model in models)
        opt.zero_grad()
        loss.backward()
        opt.step()
print(f"last loss {loss.item() / len(WAYS):.3f} (chance {math.log(LENGTH):.3f})")
