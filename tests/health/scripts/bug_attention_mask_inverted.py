"""Bug: the padding mask is built as ``tokens != PAD``, the convention of a Hugging Face
attention_mask, and given to nn.TransformerEncoder as src_key_padding_mask, which is True for
the keys to ignore: every token attends to the padding alone. Rows are padded to a fixed length,
so nothing fails; the label (which of two markers comes first) needs attention and is learned
far slower than with the right mask."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
PAD, VOCAB, LENGTH = 0, 40, 20


def batch(size=32):
    tokens = torch.full((size, LENGTH), PAD)
    labels = torch.zeros(size, dtype=torch.long)
    for row in range(size):
        n = int(torch.randint(6, LENGTH - 2, ()))
        words = torch.randint(3, VOCAB, (n,))
        first, second = torch.randperm(n)[:2].tolist()
        words[first], words[second] = 1, 2
        tokens[row, :n] = words
        labels[row] = int(first < second)
    return tokens, labels


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32, padding_idx=PAD)
        self.position = nn.Embedding(LENGTH, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(32, 2)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        h = self.encoder(x, src_key_padding_mask=tokens != PAD)  # bug: True marks the tokens
        real = (tokens != PAD).float()[..., None]
        return self.out((h * real).sum(1) / real.sum(1))


model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(60):
    tokens, labels = batch()
    loss = F.cross_entropy(model(tokens), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"last loss {loss.item():.3f}")
