"""Bug: an output layer tied to the embedding by sharing its data, out.weight.data =
emb.weight.data: two parameters over one table, each with its own gradient and Adam state, so
the shared table is stepped twice each step (out.weight = emb.weight ties them as one)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
vocab, width = 50, 64
follows = torch.stack([torch.randperm(vocab)[:3] for _ in range(vocab)])  # [V, 3] next tokens


def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.zeros(n, 33, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (n,))
    for t in range(32):
        tokens[:, t + 1] = follows[tokens[:, t], torch.randint(0, 3, (n,))]
    return tokens[:, :-1], tokens[:, 1:]


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.out = nn.Linear(width, vocab)
        self.out.weight.data = self.emb.weight.data  # bug: self.out.weight = self.emb.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.emb(tokens))[0])  # [B, T, V]


model = LanguageModel()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(100):
    inputs, targets = batch(32)
    loss = F.cross_entropy(model(inputs).reshape(-1, vocab), targets.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 25 == 0:
        print(f"step {step} loss {loss.item():.3f}")
