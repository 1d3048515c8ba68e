"""Clean: pack_padded_sequence as scripts use it. Rows sorted with their lengths; unsorted with
enforce_sorted=False; time-first; an end-of-sequence token that shares the padding's id counted
in the length; a decoder given every token but the last; a position signal added before
packing (no two padded positions alike); a scalar series padded with 0 that holds 0s of its
own; sequences padded by repeating their last value. Each model learns a label read off the
last real step."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

torch.manual_seed(0)
VOCAB, EOS = 12, 0  # id 0 pads and ends a sequence


def batch(n=32):
    lengths = torch.randint(3, 14, (n,))
    rows = [torch.randint(1, VOCAB, (int(k),)) for k in lengths]
    return rows, lengths


class Reader(nn.Module):
    def __init__(self, features=16):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, features, padding_idx=0)
        self.position = nn.Parameter(torch.randn(32, features) * 0.1)
        self.rnn = nn.GRU(features, 32, batch_first=True)
        self.time_first = nn.GRU(features, 32)
        self.series = nn.GRU(1, 32, batch_first=True)
        self.out = nn.Linear(32, 4)

    def forward(self, rows, lengths, way):
        padded = pad_sequence(rows, batch_first=True)  # [B, T]
        x = self.embed(padded)  # [B, T, F]
        if way == "sorted":
            lengths, order = lengths.sort(descending=True)
            packed = pack_padded_sequence(x[order], lengths, batch_first=True)
            _, h = self.rnn(packed)
            return self.out(h[-1])[order.argsort()]
        if way == "unsorted":
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        elif way == "time first":
            packed = pack_padded_sequence(x.transpose(0, 1), lengths, enforce_sorted=False)
            _, h = self.time_first(packed)
            return self.out(h[-1])
        elif way == "eos":  # each row ends in EOS = the padding id, counted in its length
            ended = pad_sequence([F.pad(r, (0, 1), value=EOS) for r in rows], batch_first=True)
            packed = pack_padded_sequence(
                self.embed(ended), lengths + 1, batch_first=True, enforce_sorted=False
            )
        elif way == "all but last":  # a decoder's input: every token but the last
            packed = pack_padded_sequence(
                x[:, :-1], (lengths - 1).clamp(max=x.shape[1] - 1), True, False
            )
        elif way == "position":
            x = x + self.position[: x.shape[1]]
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        elif way == "series":  # values 0-3, 0 among them, padded with 0
            series = pad_sequence([(r % 4).float()[:, None] for r in rows], batch_first=True)
            packed = pack_padded_sequence(series, lengths, batch_first=True, enforce_sorted=False)
            _, h = self.series(packed)
            return self.out(h[-1])
        else:  # padded by repeating each row's last vector
            tails = [torch.cat([e, e[-1:].expand(x.shape[1] - len(e), -1)]) for e in x.unbind()]
            packed = pack_padded_sequence(
                torch.stack(tails), lengths, batch_first=True, enforce_sorted=False
            )
        _, h = self.rnn(packed)
        return self.out(h[-1])


WAYS = ("sorted", "unsorted", "time first", "eos", "all but last", "position", "series", "edge")
model = Reader()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
for step in range(160):
    rows, lengths = batch()
    way = WAYS[(step // 10) % len(WAYS)]  # each sampled in turn (every 10th step)
    last = [r[-2] if way == "all but last" else r[-1] for r in rows]
    labels = torch.stack(last) % 4
    loss = F.cross_entropy(model(rows, lengths, way), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 40 == 0:
        print(f"step {step} ({way}) loss {loss.item():.3f}")
print(f"last loss {loss.item():.3f}")
