"""Clean: a causal language model accumulating gradients over 4 padded micro-batches as the
transformers ``Trainer`` does: each micro-batch's summed token cross-entropy divided by the
count of target tokens in the whole step, so the step's gradient is the mean's over its
tokens whatever each micro-batch's length. The step's loss is the sum of its 4 backward
losses, which it prints (the last one's was read, about a quarter of it)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
V, PAD = 40, 0


def micro_batch() -> torch.Tensor:  # [8, T] token ids, T varying, right-padded
    lengths = torch.randint(4, 30, (8,))
    start = torch.randint(1, V, (8, 1))
    ids = (start + torch.arange(int(lengths.max()))) % (V - 1) + 1  # a learnable sequence
    ids[torch.arange(ids.shape[1]) >= lengths[:, None]] = PAD
    return ids


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, 32, padding_idx=PAD)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.out = nn.Linear(64, V)

    def forward(self, ids):  # [B, T] -> [B, T, V]
        return self.out(self.rnn(self.embed(ids))[0])


model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
losses = []
for _ in range(100):
    micro = [micro_batch() for _ in range(4)]
    tokens = sum(int((ids[:, 1:] != PAD).sum()) for ids in micro)  # in the whole step
    opt.zero_grad()
    step_loss = 0.0
    for ids in micro:
        labels = ids[:, 1:].masked_fill(ids[:, 1:] == PAD, -100)  # [B, T-1]
        logits = model(ids[:, :-1])  # [B, T-1, V]
        loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="sum")
        loss = loss / tokens
        loss.backward()
        step_loss += loss.item()
    opt.step()
    losses.append(step_loss)
print("losses", " ".join(f"{v:.6f}" for v in losses))
