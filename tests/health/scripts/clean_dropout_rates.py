"""Clean: dropout at the rates PyTorch means: nn.Dropout(0.5) and (0.7), a keep probability
ported as 1 - keep_prob, a two-layer LSTM's dropout of 0.3 between its layers, attention
dropout of 0.1, and Monte Carlo dropout at 0.9 run only when predicting, with training=True
said, under no_grad, after training."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
KEEP_PROB = 0.8  # the TensorFlow original's
VOCAB, CLASSES = 50, 3


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.rnn = nn.LSTM(32, 32, num_layers=2, dropout=0.3, batch_first=True)
        self.attend = nn.MultiheadAttention(32, 4, dropout=0.1, batch_first=True)
        self.drop = nn.Dropout(0.5)
        self.hidden = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Dropout(0.7))
        self.head = nn.Linear(32, CLASSES)

    def forward(self, ids, mc=False):
        h, _ = self.rnn(self.drop(self.embed(ids)))
        h, _ = self.attend(h, h, h)
        h = F.dropout(h.mean(1), 1 - KEEP_PROB, self.training)
        h = self.hidden(h)
        if mc:
            h = F.dropout(h, 0.9, training=True)
        return self.head(h)


def batch(n):
    ids = torch.randint(1, VOCAB, (n, 12))
    return ids, (ids == 7).any(1).long() + (ids == 9).any(1).long()


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _step in range(100):
    ids, y = batch(32)
    loss = F.cross_entropy(model(ids), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    ids, y = batch(500)
    accuracy = (model(ids).argmax(1) == y).float().mean().item()
    samples = torch.stack([model(ids[:8], mc=True).softmax(1) for _ in range(20)])
print(f"held-out accuracy {accuracy:.2f}, predictive spread {samples.std(0).mean().item():.3f}")
