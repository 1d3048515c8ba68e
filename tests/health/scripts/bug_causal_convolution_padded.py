"""Bug: a language model of dilated convolutions (a Temporal Convolutional Network, WaveNet's
stack) padded on both sides: ``nn.Conv1d(..., padding=dilation)`` keeps the length, and each
output reads the input ``dilation`` positions ahead as well as behind. The causal form pads
``(k - 1) * dilation`` on the left alone (or trims that much off the right, the reference
TCN's ``Chomp1d``). No attention is computed, so no mask is missing; trained to predict each
next token, every position reads the token it is asked for, and the loss falls below what the
text allows any model that predicts (0.06 after 150 steps, where half the tokens are random
and the floor is 1.84; the causal model: 1.89): the loss measures the copying. Given the
tokens before a position alone, as at generation, it still predicts the decided tokens (0.97
of them, the causal model 1.00), which it learned at each sequence's last position, the only
one with no later token to read."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
VOCAB, LENGTH, D = 40, 32, 48
text = torch.randint(0, VOCAB, (20000,))
text[2::2] = (text[1:-1:2] * 3 + 1) % VOCAB  # every other token follows from the one before


class Layer(nn.Module):
    def __init__(self, dilation):
        super().__init__()
        # bug: padding=dilation on both sides; causal: padding=0 after F.pad(x, (2 * dilation, 0))
        self.conv = nn.Conv1d(D, 2 * D, 3, padding=dilation, dilation=dilation)

    def forward(self, x):  # [B, D, T]
        a, b = self.conv(x).chunk(2, 1)
        return x + torch.tanh(a) * torch.sigmoid(b)


class TCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.layers = nn.Sequential(*(Layer(d) for d in (1, 2, 4, 8)))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):  # [B, T] -> [B, T, VOCAB]
        return self.head(self.layers(self.embed(ids).transpose(1, 2)).transpose(1, 2))


def batch(size, step=1):
    starts = step * torch.randint(0, (len(text) - LENGTH - 1) // step, (size,))
    x = torch.stack([text[i : i + LENGTH] for i in starts])
    return x, torch.stack([text[i + 1 : i + LENGTH + 1] for i in starts])


model = TCN()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _step in range(150):
    x, y = batch(16)
    loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()

# each decided token predicted from the tokens before it alone, as at generation
model.eval()
x, y = batch(64, step=2)  # (even starts: the targets at odd positions are decided)
with torch.no_grad():
    right = [
        (model(x[:, : t + 1])[:, -1].argmax(-1) == y[:, t]).float().mean() for t in range(1, 31, 2)
    ]
print(f"last loss {loss.item():.3f}, decided tokens from the prefix alone {sum(right) / 15:.2f}")
