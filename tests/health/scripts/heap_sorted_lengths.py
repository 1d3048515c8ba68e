"""Not a leak: batches sorted by length, each 3 tokens longer than the last, and nothing kept
across steps. Host RSS still rises step after step, because glibc's malloc keeps the freed
blocks of every size it met (the GRU's per-time-step states sit between them) for reuse. The
steps get slower too (longer batches), so step-time-regression may appear beside it."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
model = nn.GRU(16, 64, batch_first=True)
head = nn.Linear(64, 8)
opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.01)
for step in range(60):
    length = 10 + 3 * step  # sentences sorted by length
    out, _ = model(torch.randn(192, length, 16))  # [192, length, 64]
    loss = F.cross_entropy(head(out).reshape(-1, 8), torch.randint(0, 8, (192 * length,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
