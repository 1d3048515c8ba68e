"""Bug: a vocabulary built from lower-cased headlines, looked up with the raw Title-Case words:
encode() lowers nothing, so every capitalised word maps to <unk> and 73% of the tokens are one
id. The model learns from the few function words left: held-out accuracy 0.25 over four
topics; looking the words up lower-cased, 0.88.
"""

import random
import re
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(0)
torch.manual_seed(0)

SYL = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]


def make_words(n):
    out = set()
    while len(out) < n:
        out.add("".join(random.choice(SYL) for _ in range(random.randint(2, 3))))
    return sorted(out)


words = make_words(1800)
random.shuffle(words)
N_TOPICS = 4
topic_words = [words[i * 300 : (i + 1) * 300] for i in range(N_TOPICS)]
common = words[1200:]
SMALL = ["of", "the", "a", "in", "on", "for", "to", "and", "with", "at", "by", "as"]


def headline(y):
    toks = []
    for _ in range(random.randint(8, 14)):
        r = random.random()
        if r < 0.3:
            toks.append(random.choice(SMALL))
        elif r < 0.6:
            toks.append(random.choice(topic_words[y]))
        elif r < 0.7:
            toks.append(random.choice(topic_words[random.randrange(N_TOPICS)]))
        else:
            toks.append(random.choice(common))
    # headline style: every word capitalised except short function words (first word always)
    return " ".join(t.capitalize() if (i == 0 or t not in SMALL) else t for i, t in enumerate(toks))


def make_split(n):
    ys = [random.randrange(N_TOPICS) for _ in range(n)]
    return [headline(y) for y in ys], ys


train_x, train_y = make_split(5000)
test_x, test_y = make_split(1000)

TOKEN_RE = re.compile(r"\w+")
PAD, UNK = 0, 1
counts = Counter(w for s in train_x for w in TOKEN_RE.findall(s.lower()))
itos = ["<pad>", "<unk>"] + [w for w, c in counts.most_common() if c >= 2]
stoi = {w: i for i, w in enumerate(itos)}
print("vocab size", len(itos))


def encode(text, max_len=16):
    ids = [stoi.get(w, UNK) for w in TOKEN_RE.findall(text)][:max_len]
    return ids + [PAD] * (max_len - len(ids))


Xtr = torch.tensor([encode(s) for s in train_x])
Xte = torch.tensor([encode(s) for s in test_x])
Ytr = torch.tensor(train_y)
Yte = torch.tensor(test_y)


def unk_share(X):
    real = X != PAD
    return ((X == UNK) & real).sum().item() / real.sum().item()


class BagClassifier(nn.Module):
    def __init__(self, vocab, dim=64, n_cls=N_TOPICS):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.ff = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, n_cls))

    def forward(self, x):
        mask = (x != PAD).unsqueeze(-1).float()
        h = (self.emb(x) * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.ff(h)


model = BagClassifier(len(itos))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(6):
    model.train()
    perm = torch.randperm(len(Xtr))
    total = 0.0
    for i in range(0, len(perm), 64):
        idx = perm[i : i + 64]
        loss = F.cross_entropy(model(Xtr[idx]), Ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item() * len(idx)
    print(f"epoch {epoch} loss {total / len(Xtr):.4f}")

model.eval()
with torch.no_grad():
    acc = (model(Xte).argmax(1) == Yte).float().mean().item()
print(
    f"held-out accuracy {acc:.3f}, unknown tokens {unk_share(Xtr):.0%} (train), {unk_share(Xte):.0%} (held out)"
)
