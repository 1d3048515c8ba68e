"""Bug: a CTC model that pools its 32 frames by 4 (8 out) for transcripts of 8-12 labels, with
zero_infinity=True: most targets cannot be aligned to 8 frames, their loss and gradient are
set to 0, and the model learns from the few short ones."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
T, N, C, S = 32, 8, 12, 12  # frames, batch, classes (0: blank), longest target
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, C))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ctc = nn.CTCLoss(blank=0, zero_infinity=True)
for _step in range(120):
    x = torch.randn(T, N, 16)
    out = F.avg_pool1d(model(x).permute(1, 2, 0), 4).permute(2, 0, 1)  # bug: [T / 4, N, C]
    lengths = torch.randint(8, S + 1, (N,))
    targets = torch.randint(1, C, (N, S))
    log_probs = F.log_softmax(out, dim=-1)
    loss = ctc(log_probs, targets, torch.full((N,), T // 4), lengths)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
