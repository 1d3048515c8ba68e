"""Bug: a transformer encoder over padded token ids given no src_key_padding_mask (the mask is
made, and used only to pool over the tokens): every token attends to the padding too. Trained
on rows padded to 32 it scores well on rows padded alike, and worse on the same kind of rows
padded to 64."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
V, PAD, S = 24, 0, 32


def batch(n: int, width: int = S) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.randint(4, S, (n,))
    ids = torch.randint(3, V, (n, width))
    ids = ids.masked_fill(torch.arange(width)[None] >= lengths[:, None], PAD)
    return ids, ((ids == 3).sum(1) > (ids == 4).sum(1)).long()  # more 3s than 4s


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, 64, padding_idx=PAD)
        self.pos = nn.Embedding(96, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.out = nn.Linear(64, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pad = ids == PAD
        h = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        h = self.enc(h)  # bug: self.enc(h, src_key_padding_mask=pad)
        keep = (~pad).float()[..., None]
        return self.out((h * keep).sum(1) / keep.sum(1))


model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(300):
    ids, y = batch(32)
    loss = F.cross_entropy(model(ids), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    for width in (S, 64):
        torch.manual_seed(1)
        ids, y = batch(1000, width)
        accuracy = (model(ids).argmax(1) == y).float().mean().item()
        print(f"held-out accuracy, rows padded to {width}: {accuracy:.3f}")
