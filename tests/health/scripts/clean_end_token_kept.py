"""Clean: padding left out of a language model's labels without its texts' end token: the end
token given as the padding token too but the labels masked by the attention mask
(``labels[mask == 0] = -100``); a padding token of its own, masked by id; and the BOS token
given as the padding token (a workaround TRL's users were offered), masked by id, no text
ending in it (each starts with it)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
VOCAB, LENGTH, D = 32, 16, 32
END, STOP, PAD, BOS = 0, 1, 2, 3  # the end-of-text token, the word that ends each text


def padded(pad, bos=False, size=16):
    """Texts ending in STOP, END (after a BOS with ``bos``), padded with ``pad`` on the right."""
    ids = torch.full((size, LENGTH), pad)
    mask = torch.zeros(size, LENGTH, dtype=torch.long)
    for row, length in enumerate(torch.randint(3, LENGTH, (size,)).tolist()):
        text = torch.randint(4, VOCAB, (length,))
        text[-2:] = torch.tensor([STOP, END])
        if bos:
            text[0] = BOS
        ids[row, :length], mask[row, :length] = text, 1
    return ids, mask


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.position = nn.Embedding(LENGTH, D)
        self.qkv = nn.Linear(D, 3 * D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids, attention_mask):  # [B, T], [B, T] -> [B, T, VOCAB]
        t = ids.shape[1]
        h = self.embed(ids) + self.position(torch.arange(t))
        q, k, v = self.qkv(h).chunk(3, -1)
        hidden = ~torch.ones(t, t, dtype=torch.bool).tril() | (attention_mask[:, None] == 0)
        scores = (q @ k.transpose(1, 2) / D**0.5).masked_fill(hidden, float("-inf"))
        h = h + torch.nan_to_num(scores.softmax(-1)) @ v
        return self.head(h + self.mlp(h))


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(90):
    kind = step % 3
    if kind == 0:  # the end token as padding too, masked by position
        ids, mask = padded(END)
        labels = ids.masked_fill(mask == 0, -100)
    elif kind == 1:  # a padding token of its own, masked by id
        ids, mask = padded(PAD)
        labels = ids.masked_fill(ids == PAD, -100)
    else:  # the BOS as padding (a workaround of TRL's users), masked by id: no text ends in it
        ids, mask = padded(BOS, bos=True)
        labels = ids.masked_fill(ids == BOS, -100)
    logits = model(ids, mask)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 30 == 0:
        print(f"step {step} loss {loss.item():.3f}")
