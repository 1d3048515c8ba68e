"""Clean: attention over padded rows that masks the padding in each way (an encoder's
src_key_padding_mask, scaled_dot_product_attention's boolean attn_mask, scores by hand filled
with -inf before the softmax), a causal model over rows padded on the right (no token attends
to a later key), and an encoder over rows of one length (no padding to mask)."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
V, PAD, S = 24, 0, 24


def batch(n: int, same: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.full((n,), S) if same else torch.randint(4, S, (n,))
    ids = torch.randint(3, V, (n, S))
    ids = ids.masked_fill(torch.arange(S)[None] >= lengths[:, None], PAD)
    return ids, ((ids == 3).sum(1) > (ids == 4).sum(1)).long()


class Model(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.emb = nn.Embedding(V, 32, padding_idx=PAD)
        if how == "encoder":
            layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
            self.enc = nn.TransformerEncoder(layer, 1)
        else:
            self.qkv = nn.Linear(32, 96)
        self.out = nn.Linear(32, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pad = ids == PAD  # [B, S]
        h = self.emb(ids)
        if self.how == "encoder":
            h = self.enc(h, src_key_padding_mask=pad)
        elif self.how in ("sdpa", "causal"):
            q, k, v = self.qkv(h).view(*ids.shape, 3, 4, 8).permute(2, 0, 3, 1, 4)
            if self.how == "sdpa":  # True where a key takes part
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=~pad[:, None, None, :])
            else:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = o.transpose(1, 2).reshape(h.shape)
        else:  # by hand
            q, k, v = self.qkv(h).chunk(3, dim=-1)
            scores = q @ k.transpose(1, 2) / math.sqrt(32)
            scores = scores.masked_fill(pad[:, None, :], float("-inf"))
            h = F.softmax(scores, dim=-1) @ v
        if self.how == "causal":  # the last token's state
            last = (~pad).sum(1) - 1
            return self.out(h[torch.arange(len(ids)), last])
        keep = (~pad).float()[..., None]
        return self.out((h * keep).sum(1) / keep.sum(1))


for how in ("encoder", "sdpa", "by hand", "causal", "one length"):
    torch.manual_seed(0)
    model = Model("encoder" if how == "one length" else how)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(100):
        ids, y = batch(32, same=how == "one length")
        loss = F.cross_entropy(model(ids), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        ids, y = batch(500, same=how == "one length")
        print(f"{how}: held-out accuracy {(model(ids).argmax(1) == y).float().mean():.3f}")
