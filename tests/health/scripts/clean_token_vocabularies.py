"""Clean: a topic classifier over a Zipf-distributed corpus of ~9,000 word types, its
vocabulary capped at the 2,000 most frequent words: the long tail makes about 10% of the tokens
<unk>, train and held out alike (and padding fills the rows' ends), and the model learns the
topics from the frequent words.
"""

import random
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(14)
torch.manual_seed(14)

N_TOPICS = 5
V_TYPES = 9000
SYL = [c + v for c in "bcdfghjklmnprstvwxz" for v in "aeiouy"]
words, seen = [], set()
while len(words) < V_TYPES:
    w = "".join(random.choice(SYL) for _ in range(random.randint(1, 4)))
    if w not in seen:
        seen.add(w)
        words.append(w)

# one global Zipf law over ranks; each topic boosts its own band of mid-frequency words
zipf = [1.0 / (r + 1) ** 1.05 for r in range(V_TYPES)]
topic_bands = [list(range(100 + 150 * t, 250 + 150 * t)) for t in range(N_TOPICS)]


def sample_doc(t, n):
    out = []
    for _ in range(n):
        if random.random() < 0.25:
            out.append(words[random.choice(topic_bands[t])])
        else:
            out.append(words[random.choices(range(V_TYPES), cum_weights=CUM)[0]])
    return out


CUM = []
acc_w = 0.0
for z in zipf:
    acc_w += z
    CUM.append(acc_w)


def make(n):
    ts = [random.randrange(N_TOPICS) for _ in range(n)]
    return [sample_doc(t, random.randint(12, 24)) for t in ts], ts


train_docs, train_t = make(4000)
test_docs, test_t = make(1000)

MAX_VOCAB = 2000
freq = Counter(w for d in train_docs for w in d)
itos = ["<pad>", "<unk>"] + [w for w, _ in freq.most_common(MAX_VOCAB - 2)]
stoi = {w: i for i, w in enumerate(itos)}
print("types seen", len(freq), "vocab", len(itos))


def batchify(docs, L=24):
    X = torch.zeros(len(docs), L, dtype=torch.long)
    for i, d in enumerate(docs):
        ids = torch.tensor([stoi.get(w, 1) for w in d[:L]])
        X[i, : len(ids)] = ids
    return X


Xtr, Xte = batchify(train_docs), batchify(test_docs)
ytr, yte = torch.tensor(train_t), torch.tensor(test_t)


def unk_share(X):
    m = X != 0
    return ((X == 1) & m).sum().item() / m.sum().item()


emb = nn.EmbeddingBag(len(itos), 64, mode="mean", padding_idx=0)
head = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, N_TOPICS))
params = list(emb.parameters()) + list(head.parameters())
opt = torch.optim.Adam(params, lr=3e-3)
for epoch in range(8):
    emb.train()
    head.train()
    perm = torch.randperm(len(Xtr))
    for i in range(0, len(perm), 64):
        b = perm[i : i + 64]
        loss = F.cross_entropy(head(emb(Xtr[b])), ytr[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")

emb.eval()
head.eval()
with torch.no_grad():
    acc = (head(emb(Xte)).argmax(1) == yte).float().mean().item()
print(
    f"held-out accuracy {acc:.3f}, unknown tokens {unk_share(Xtr):.0%} (train), {unk_share(Xte):.0%} (held out)"
)
