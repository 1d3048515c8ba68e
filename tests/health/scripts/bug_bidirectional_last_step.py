"""Bug: a bidirectional LSTM classifies 60-token sequences by their first token, and summarises
each by its output at the last time step, out[:, -1, :]. There the backward direction has read
only the last token, and the first token must reach the head through 60 steps of the forward
direction. Held-out accuracy 0.25 over four classes (chance); both directions' final states,
torch.cat([h_n[-2], h_n[-1]], dim=1), 1.00.
"""

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, CLASSES, LENGTH, HIDDEN = 20, 4, 60, 32


def make_split(n):
    x = torch.randint(CLASSES, VOCAB, (n, LENGTH))
    y = torch.randint(0, CLASSES, (n,))
    x[:, 0] = y
    return x, y


class BiLSTMClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.lstm = nn.LSTM(32, HIDDEN, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * HIDDEN, CLASSES)

    def forward(self, x):
        out, (h_n, _) = self.lstm(self.embed(x))
        return self.head(out[:, -1, :])  # bug: torch.cat([h_n[-2], h_n[-1]], dim=1)


def main():
    torch.manual_seed(0)
    x_train, y_train = make_split(4000)
    x_test, y_test = make_split(1000)
    model = BiLSTMClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _step in range(150):
        batch = torch.randint(0, len(x_train), (64,))
        loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"HELDOUT acc={accuracy:.3f}")


if __name__ == "__main__":
    main()
