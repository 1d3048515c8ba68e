"""Bug: a collate function sorts the lengths in descending order, as pack_padded_sequence's
enforce_sorted=True asks, but leaves the rows as they were: each row is packed with another's
length, cut short or read into its padding, and the label (from the last real token) cannot be
learned."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader

torch.manual_seed(0)
sequences = [torch.randint(1, 12, (int(torch.randint(3, 16, ())),)) for _ in range(3000)]
data = [(s, int(s[-1]) % 4) for s in sequences]


def collate(batch):
    rows, labels = zip(*batch, strict=True)
    lengths = torch.tensor(sorted((len(r) for r in rows), reverse=True))  # bug: rows unsorted
    return pad_sequence(list(rows), batch_first=True), lengths, torch.tensor(labels)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(12, 16, padding_idx=0)
        self.rnn = nn.GRU(16, 32, batch_first=True)
        self.out = nn.Linear(32, 4)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True)
        _, h = self.rnn(packed)  # h [1, B, 32]
        return self.out(h[-1])


model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
loader = DataLoader(data, batch_size=64, shuffle=True, collate_fn=collate)
for _epoch in range(2):
    for tokens, lengths, labels in loader:
        loss = F.cross_entropy(model(tokens, lengths), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
print(f"last loss {loss.item():.3f} (chance: {torch.log(torch.tensor(4.0)).item():.3f})")
