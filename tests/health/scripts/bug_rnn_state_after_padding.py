"""Bug: rows of 5 to 60 words, padded at their end to the longest, go into an LSTM as a plain
tensor, and the label is read off h_n: for a padded row that is the state after its padding,
up to 55 steps past its last word, so what decides the label (one word anywhere in the row)
must be carried through all of them. Held out, after these 300 steps: 0.50 accuracy (chance
0.25), where rows packed by their lengths (pack_padded_sequence) reach 1.00."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
VOCAB, LONGEST, CLASSES, PAD = 50, 60, 4, 0


def batch(n):
    lengths = torch.randint(5, LONGEST + 1, (n,))
    ids = torch.randint(1 + CLASSES, VOCAB, (n, LONGEST))
    labels = torch.randint(0, CLASSES, (n,))
    at = (torch.rand(n) * lengths).long()  # the word that decides the label
    ids[torch.arange(n), at] = 1 + labels
    words = torch.arange(LONGEST)[None] < lengths[:, None]
    return torch.where(words, ids, PAD), lengths, labels


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32, padding_idx=PAD)
        self.rnn = nn.LSTM(32, 64, batch_first=True)
        self.out = nn.Linear(64, CLASSES)

    def forward(self, ids, lengths):
        _, (h, _) = self.rnn(self.embed(ids))  # bug: the rows are not packed by their lengths
        return self.out(h[-1])


model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _step in range(300):
    ids, lengths, labels = batch(64)
    loss = F.cross_entropy(model(ids, lengths), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
ids, lengths, labels = batch(1000)
with torch.no_grad():
    accuracy = (model(ids, lengths).argmax(1) == labels).float().mean()
print(f"held-out accuracy {accuracy:.2f} (chance {1 / CLASSES:.2f})")
