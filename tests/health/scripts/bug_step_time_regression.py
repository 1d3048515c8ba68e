"""Bug: a contrastive memory bank that is never capped, so every step compares against more."""

import torch
from torch import nn

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64))
opt = torch.optim.SGD(encoder.parameters(), lr=0.01)
bank = torch.randn(64, 64)
for _step in range(120):
    x = torch.randn(64, 32)
    z = nn.functional.normalize(encoder(x), dim=1)
    logits = z @ bank.T  # [B, bank size]
    loss = nn.functional.cross_entropy(logits, torch.arange(64))
    opt.zero_grad()
    loss.backward()
    opt.step()
    bank = torch.cat([z.detach().repeat(4, 1), bank])  # bug: should keep only the newest K rows
print("bank rows", bank.shape[0])
