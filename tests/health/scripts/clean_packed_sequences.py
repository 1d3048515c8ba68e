"""Clean: pack_padded_sequence as scripts use it, every way on every step. Rows sorted with
their lengths; unsorted with enforce_sorted=False; time-first; an end-of-sequence token that
shares the padding's id counted in the length; a decoder given every token but the last; a
position signal added before packing (no two padded positions alike); a scalar series padded
with 0 that holds 0s of its own; sequences padded by repeating their last value; a forecaster's
history packed without the 3 steps it predicts; a truncation by clamping the lengths; vectors
whose own last steps are zeros, as the padding is. Each model learns a label read off a real
step."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

torch.manual_seed(0)
VOCAB, EOS = 12, 0  # id 0 pads and ends a sequence


def batch(n=32):
    lengths = torch.randint(5, 14, (n,))
    rows = [torch.randint(1, VOCAB, (int(k),)) for k in lengths]
    return rows, lengths


class Reader(nn.Module):
    def __init__(self, features=8):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, features, padding_idx=0)
        self.position = nn.Parameter(torch.randn(32, features) * 0.1)
        self.rnn = nn.GRU(features, 16, batch_first=True)
        self.time_first = nn.GRU(features, 16)
        self.series = nn.GRU(1, 16, batch_first=True)
        self.out = nn.Linear(16, 4)

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
        elif way == "edge":  # padded by repeating each row's last vector
            tails = [torch.cat([e, e[-1:].expand(x.shape[1] - len(e), -1)]) for e in x.unbind()]
            packed = pack_padded_sequence(
                torch.stack(tails), lengths, batch_first=True, enforce_sorted=False
            )
        elif way == "horizon":  # the last 3 steps are what a forecaster predicts
            packed = pack_padded_sequence(x, lengths - 3, batch_first=True, enforce_sorted=False)
        elif way == "truncated":  # the first 6 steps of each row read
            packed = pack_padded_sequence(
                x, lengths.clamp(max=6), batch_first=True, enforce_sorted=False
            )
        else:  # half the rows end in 3 real steps of zeros, as the padding is
            quiet = pad_sequence(
                [F.pad(e, (0, 0, 0, 3 * (i % 2))) for i, e in enumerate(x.detach().unbind())],
                batch_first=True,
            )
            packed = pack_padded_sequence(
                quiet,
                lengths + 3 * (torch.arange(len(rows)) % 2),
                batch_first=True,
                enforce_sorted=False,
            )
        _, h = self.rnn(packed)
        return self.out(h[-1])


WAYS = ("sorted", "unsorted", "time first", "eos", "all but last", "position", "series", "edge")
WAYS += ("horizon", "truncated", "quiet")
LABEL_AT = {"all but last": -2, "horizon": -4, "truncated": 5}
model = Reader()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
for step in range(80):
    rows, lengths = batch(16)
    losses = []
    for way in WAYS:
        at = LABEL_AT.get(way, -1)
        labels = torch.stack([r[min(at, len(r) - 1)] if at >= 0 else r[at] for r in rows]) % 4
        losses.append(F.cross_entropy(model(rows, lengths, way), labels))
    loss = sum(losses)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 25 == 0:
        print(f"step {step}: " + ", ".join(f"{v.item():.2f}" for v in losses))
print(f"last loss {loss.item():.3f}")
