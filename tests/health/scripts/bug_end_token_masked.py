"""Bug: a tokenizer without a padding token given its end-of-text token as one (``pad_id =
END``, transformers' ``tokenizer.pad_token = tokenizer.eos_token``), and the labels made by
masking the padding id (``labels[labels == pad_id] = -100``, what
``DataCollatorForLanguageModeling`` does). That masks the end token each text ends with too:
the model is never trained to predict it. Each text here ends right after a STOP token, so the
end is certain; after 150 steps the model predicts the end token after STOP in none of the
held-out texts, where labels masked by the attention mask instead (``labels[mask == 0] =
-100``) teach it in all of them: at generation it never stops."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
VOCAB, LENGTH, D = 32, 16, 32
END, STOP = 0, 1  # the end-of-text token, also the padding id; the word that ends each text


def batch(size):
    """Texts of 3 to 15 tokens ending in STOP, END; padded with END on the right."""
    ids = torch.full((size, LENGTH), END)
    mask = torch.zeros(size, LENGTH, dtype=torch.long)
    for row, length in enumerate(torch.randint(3, LENGTH, (size,)).tolist()):
        text = torch.randint(2, VOCAB, (length,))
        text[-2:] = torch.tensor([STOP, END])
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
for _step in range(150):
    ids, mask = batch(16)
    labels = ids.masked_fill(ids == END, -100)  # bug: ids.masked_fill(mask == 0, -100)
    logits = model(ids, mask)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()

model.eval()
ids, mask = batch(200)
with torch.no_grad():
    predicted = model(ids, mask).argmax(-1)  # [B, T]
after_stop = (ids == STOP) & (mask == 1)
ended = (predicted[after_stop] == END).float().mean()
print(f"last loss {loss.item():.3f}, texts whose end is predicted after STOP {ended:.2f}")
