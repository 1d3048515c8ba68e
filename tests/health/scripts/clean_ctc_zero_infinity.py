"""Clean: zero_infinity=True dropping what it is there for, the odd target too long for its
input (an utterance cut short: about one in eight), and 1-D concatenated targets whose repeated
labels fit."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
T, N, C = 30, 8, 12  # frames, batch, classes (0: blank)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, C))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ctc = nn.CTCLoss(blank=0, zero_infinity=True)
for step in range(120):
    x = torch.randn(T, N, 16)
    frames = torch.full((N,), T)
    frames[step % N] = 4  # cut short: its 6 labels do not fit
    lengths = torch.full((N,), 6)
    targets = torch.randint(1, C, (int(lengths.sum()),))
    targets[1] = targets[0]  # a repeat, which needs a blank between: 7 frames
    log_probs = F.log_softmax(model(x), dim=-1)  # [T, N, C]
    loss = ctc(log_probs, targets, frames, lengths)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
