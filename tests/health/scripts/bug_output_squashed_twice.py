"""Bug: a multi-label tagger whose head ends in nn.Sigmoid(), and a loss helper that takes
torch.sigmoid of its output again before F.binary_cross_entropy. The loss's probabilities lie in
(0.5, 0.73): the model learns to push every output down, and read at 0.5 it tags nothing.
Held-out micro-F1 0.00 (mAP 0.26) over 12 tags, 23% of them positive; the head's probabilities
given to the loss as they are, micro-F1 0.67 (mAP 0.75).
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

np.random.seed(5)
torch.manual_seed(5)
N_FEAT, N_TAGS = 40, 12

A = np.random.randn(N_FEAT, N_TAGS) / np.sqrt(N_FEAT) * 3.0
B = np.random.randn(N_FEAT, N_TAGS) / np.sqrt(N_FEAT) * 1.5


def synth(n):
    x = np.random.randn(n, N_FEAT).astype(np.float32)
    score = x @ A + np.abs(x) @ B - 2.8
    prob = 1 / (1 + np.exp(-score))
    y = (np.random.rand(n, N_TAGS) < prob).astype(np.float32)
    return torch.tensor(x), torch.tensor(y)


x_tr, y_tr = synth(8000)
x_va, y_va = synth(3000)
print(f"positive rate {y_tr.mean().item():.3f}")


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(N_FEAT, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU()
        )
        self.classifier = nn.Sequential(nn.Linear(128, N_TAGS), nn.Sigmoid())

    def forward(self, x):
        return self.classifier(self.encoder(x))


def multilabel_loss(probs, targets):
    return F.binary_cross_entropy(torch.sigmoid(probs), targets)


def micro_f1(pred, target):
    tp = (pred * target).sum()
    return (2 * tp / (pred.sum() + target.sum())).item()


def mean_ap(scores, target):
    aps = []
    for j in range(target.shape[1]):
        order = torch.argsort(scores[:, j], descending=True)
        t = target[order, j]
        hits = torch.cumsum(t, 0)
        prec = hits / torch.arange(1, len(t) + 1)
        aps.append(((prec * t).sum() / t.sum().clamp_min(1)).item())
    return sum(aps) / len(aps)


def train_epoch(model, loader, opt):
    model.train()
    for xb, yb in loader:
        opt.zero_grad()
        loss = multilabel_loss(model(xb), yb)
        loss.backward()
        opt.step()
    return loss.item()


tagger = Tagger()
opt = torch.optim.AdamW(tagger.parameters(), lr=2e-3, weight_decay=1e-2)
loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=128, shuffle=True)
for epoch in range(12):
    last = train_epoch(tagger, loader, opt)
    if epoch % 4 == 0:
        print(f"epoch {epoch} loss {last:.4f}")

tagger.eval()
with torch.no_grad():
    scores = tagger(x_va)
pred = (scores > 0.5).float()
print(
    f"HELDOUT micro_f1={micro_f1(pred, y_va):.4f} mAP={mean_ap(scores, y_va):.4f} pred_pos_rate={pred.mean().item():.4f}"
)
