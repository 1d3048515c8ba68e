"""Clean: recurrent layers over rows of 3 to 20 words padded at their end, each row's state read
where its words end, every way on every step: rows packed by their lengths (h_n is then each
row's state at its last word); the output gathered at each row's last word; rows padded at
their start instead (Keras's default), whose last position is a word; a mean over each row's
words, masked; a bidirectional layer over packed rows; the backward half of a bidirectional
layer's h_n (its state at position 0, after every word) beside the forward half's output at
the last word; packed rows' output padded again by pad_packed_sequence, gathered at each row's
last word. Each learns a label set by one word anywhere in the row."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)
VOCAB, LONGEST, CLASSES, PAD = 30, 20, 4, 0
WAYS = ("packed", "gathered", "left", "mean", "bidirectional", "halves", "unpacked")


def batch(n=32, left=False):
    lengths = torch.randint(3, LONGEST + 1, (n,))
    ids = torch.randint(1 + CLASSES, VOCAB, (n, LONGEST))
    labels = torch.randint(0, CLASSES, (n,))
    at = (torch.rand(n) * lengths).long()
    ids[torch.arange(n), at] = 1 + labels
    words = torch.arange(LONGEST)[None] < lengths[:, None]
    padded = torch.where(words, ids, PAD)
    if left:  # each row's words moved to its end
        shift = LONGEST - lengths
        index = (torch.arange(LONGEST)[None] - shift[:, None]) % LONGEST
        padded = padded.gather(1, index)
    return padded, lengths, labels


class Reader(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16, padding_idx=PAD)
        self.rnn = nn.GRU(16, 32, batch_first=True)
        self.both = nn.LSTM(16, 16, batch_first=True, bidirectional=True)
        self.out = nn.Linear(32, CLASSES)

    def forward(self, ids, lengths, way):
        x = self.embed(ids)  # [B, T, 16]
        rows = torch.arange(len(ids))
        if way in ("packed", "bidirectional", "unpacked"):
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            if way == "packed":
                return self.out(self.rnn(packed)[1][-1])
            if way == "unpacked":
                out, _ = pad_packed_sequence(self.rnn(packed)[0], batch_first=True)
                return self.out(out[rows, lengths - 1])
            h = self.both(packed)[1][0]  # [2, B, 16]
            return self.out(torch.cat([h[-2], h[-1]], 1))
        if way == "halves":
            out, (h, _) = self.both(x)  # out [B, T, 32]
            return self.out(torch.cat([out[rows, lengths - 1, :16], h[-1]], 1))
        out, h = self.rnn(x)  # out [B, T, 32]
        if way == "gathered":
            return self.out(out[rows, lengths - 1])
        if way == "left":
            return self.out(h[-1])
        words = (torch.arange(ids.shape[1])[None] < lengths[:, None]).float()[..., None]
        return self.out((out * words).sum(1) / words.sum(1))


model = Reader()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
for _step in range(100):
    loss = 0.0
    for way in WAYS:
        ids, lengths, labels = batch(left=way == "left")
        loss = loss + F.cross_entropy(model(ids, lengths, way), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"last loss {loss.item() / len(WAYS):.3f} (chance {torch.log(torch.tensor(4.0)):.3f})")
