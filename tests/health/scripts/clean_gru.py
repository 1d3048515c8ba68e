"""Clean: a GRU sequence classifier with truncated state carried correctly (detached)."""

import torch
from torch import nn

torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self, vocab=100, dim=32, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, classes)

    def forward(self, tokens, h=None):
        states, h = self.rnn(self.embed(tokens), h)
        return self.out(states[:, -1]), h


model = Classifier()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
h = None
for _step in range(120):
    tokens = torch.randint(0, 100, (16, 12))
    labels = tokens[:, 0] % 5
    logits, h = model(tokens, h)
    h = h.detach()  # carry the state, not its graph
    loss = nn.functional.cross_entropy(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done", round(loss.item(), 3))
