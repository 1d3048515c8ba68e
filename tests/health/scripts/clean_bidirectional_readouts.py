"""Clean: bidirectional RNNs read in ways that use both directions: a classifier that joins the
forward direction's last output with the backward direction's first (out[:, -1, :H] and
out[:, 0, H:], where each has read the whole sequence), one that pools its outputs over the
time steps, a tagger with a label at every step; and a one-way GRU read at its last step.
"""

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, LENGTH, HIDDEN = 12, 30, 24


class Classifier(nn.Module):
    def __init__(self, readout, bidirectional=True):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.rnn = nn.GRU(16, HIDDEN, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(HIDDEN * (2 if bidirectional else 1), 2)
        self.readout = readout

    def forward(self, x):
        out, _ = self.rnn(self.embed(x))
        if self.readout == "ends":
            return self.head(torch.cat([out[:, -1, :HIDDEN], out[:, 0, HIDDEN:]], dim=1))
        if self.readout == "mean":
            return self.head(out.mean(dim=1))
        if self.readout == "tags":
            return self.head(out)  # [B, T, 2]
        return self.head(out[:, -1])


def train(model, tags=False):
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _step in range(30):
        x = torch.randint(0, VOCAB, (32, LENGTH))
        if tags:
            loss = F.cross_entropy(model(x).transpose(1, 2), (x > 5).long())
        else:
            loss = F.cross_entropy(model(x), (x[:, 0] > 5).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def main():
    torch.manual_seed(0)
    print("ends", train(Classifier("ends")))
    print("mean", train(Classifier("mean")))
    print("tags", train(Classifier("tags"), tags=True))
    print("one way", train(Classifier("last", bidirectional=False)))


if __name__ == "__main__":
    main()
