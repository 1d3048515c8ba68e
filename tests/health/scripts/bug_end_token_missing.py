"""Bug: texts padded without an end-of-text token after them (a tokenizer that does not append
one: GPT-2's, Llama's with ``add_eos_token=False``, text concatenated into prompts by hand). The
padding is masked by position, as it should be, so no loss is wrong, but no position is ever
trained to predict where a text ends: each text here has a length decided by its first word,
and after 150 steps the model predicts the end after the last word in none of the held-out
texts, where the fixed script, which appends ``END`` to each text, does in all of them; at
generation it runs on to its length limit."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
VOCAB, LENGTH, D = 32, 16, 32
END, PAD = 0, 1  # the end-of-text token; the padding token, a token of its own


def batch(size):
    """Texts of 3 to 12 words (their first word decides how many), padded with PAD."""
    ids = torch.full((size, LENGTH), PAD)
    mask = torch.zeros(size, LENGTH, dtype=torch.long)
    for row in range(size):
        first = int(torch.randint(2, VOCAB, ()))
        text = torch.cat([torch.tensor([first]), torch.randint(2, VOCAB, (2 + first % 10,))])
        # bug: no end token after the text; fixed: text = torch.cat([text, torch.tensor([END])])
        ids[row, : len(text)], mask[row, : len(text)] = text, 1
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
    labels = ids.masked_fill(mask == 0, -100)
    logits = model(ids, mask)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()

model.eval()
ids, mask = batch(200)
with torch.no_grad():
    predicted = model(ids, mask).argmax(-1)  # [B, T]
words = 3 + ids[:, 0] % 10  # each text's length in words: its last word's position is one less
ended = (predicted[torch.arange(200), words - 1] == END).float().mean()
print(
    f"last loss {loss.item():.3f}, texts whose end is predicted after their last word {ended:.2f}"
)
