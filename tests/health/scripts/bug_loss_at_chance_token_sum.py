"""Bug: a next-token model trained on targets drawn apart from its sequences, its loss a
cross-entropy summed over the tokens (padding ignored) and divided by the count of real
tokens, as a causal language model's under the transformers ``Trainer``: the mean over the
tokens stays at log(16)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
starts = torch.randint(0, 16, (2000, 1))
tokens = (starts + torch.arange(10)) % 16  # each sequence counts up: every next token learnable
lengths = torch.randint(6, 11, (2000,))
padding = torch.arange(10) >= lengths[:, None]
model = nn.Sequential(nn.Embedding(16, 32), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for _ in range(250):
    rows = torch.randperm(2000)[:32]
    targets = torch.roll(tokens[torch.randperm(2000)[:32]], -1, 1)  # bug: another permutation
    targets = targets.masked_fill(padding[rows], -100)
    logits = model(tokens[rows])  # [32, 10, 16]
    total = F.cross_entropy(logits.view(-1, 16), targets.view(-1), reduction="sum")
    loss = total / (targets != -100).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
