"""Bug: a small transformer built on F.scaled_dot_product_attention, given its Hugging Face
style attention_mask (1 for a token, 0 for padding) cast to float as attn_mask. SDPA adds a
float mask to the scores, so no key is hidden: the tokens get +1 and the padding is attended.
Trained on batches bucketed by length (little padding), it is scored on rows padded to 64:
held-out accuracy 0.797 (0.895 padded to each batch's longest); the mask given as .bool(),
0.972 both ways.
"""

import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
VOCAB, PAD, MAXLEN = 50, 0, 64


CLS = 1


def make_example(rng):
    n = rng.randint(6, 30)
    share = rng.uniform(0.05, 0.55)
    positive = rng.rand(n) < share
    toks = np.where(positive, rng.randint(2, 12, size=n), rng.randint(12, VOCAB, size=n))
    return [CLS] + toks.tolist(), int(positive.mean() > 0.3)


def collate(examples, pad_to=None):
    L = pad_to or max(len(t) for t, _ in examples)
    ids = torch.full((len(examples), L), PAD, dtype=torch.long)
    for i, (t, _) in enumerate(examples):
        ids[i, : len(t)] = torch.tensor(t)
    attention_mask = (ids != PAD).long()
    labels = torch.tensor([y for _, y in examples])
    return ids, attention_mask, labels


class SelfAttention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, attention_mask):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        mask = attention_mask[:, None, None, :].float()
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.attn = SelfAttention(d, h)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, m):
        x = x + self.attn(self.ln1(x), m)
        return x + self.ff(self.ln2(x))


class Classifier(nn.Module):
    def __init__(self, d=48, h=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.pos = nn.Embedding(MAXLEN, d)
        self.blocks = nn.ModuleList([Block(d, h) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 2)

    def forward(self, ids, attention_mask):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for b in self.blocks:
            x = b(x, attention_mask)
        return self.head(self.ln(x[:, 0]))


def main():
    rng = np.random.RandomState(0)
    train = [make_example(rng) for _ in range(3000)]
    test = [make_example(rng) for _ in range(600)]
    # bucket by length so that training batches carry almost no padding
    train.sort(key=lambda ex: len(ex[0]))
    batches = [train[i : i + 50] for i in range(0, len(train), 50)]
    model = Classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    for epoch in range(6):
        model.train()
        random.shuffle(batches)
        tot = 0.0
        for batch in batches:
            ids, am, y = collate(batch)
            loss = F.cross_entropy(model(ids, am), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
        print(f"epoch {epoch} train loss {tot / len(batches):.4f}")
    model.eval()
    with torch.no_grad():
        accs = {}
        for name, pad_to in [("batchpad", None), ("pad64", MAXLEN)]:
            correct = 0
            for i in range(0, len(test), 100):
                ids, am, y = collate(test[i : i + 100], pad_to)
                correct += (model(ids, am).argmax(-1) == y).sum().item()
            accs[name] = correct / len(test)
    print(f"HELDOUT acc_pad64={accs['pad64']:.4f} acc_batchpad={accs['batchpad']:.4f}")


if __name__ == "__main__":
    main()
