"""Clean: CTC targets of different lengths, padded with 0 (the blank) past each target's own
length, given as target_lengths; then concatenated targets, 1-D, by keyword, with the blank
last (blank=C - 1) and labels from 0."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
T, N, C, S = 30, 8, 12, 6  # frames, batch, classes, longest target
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, C))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ctc = nn.CTCLoss(blank=0)
for step in range(120):
    x = torch.randn(T, N, 16)
    lengths = torch.randint(2, S + 1, (N,))
    log_probs = F.log_softmax(model(x), dim=-1)  # [T, N, C]
    if step % 2:
        targets = torch.randint(1, C, (N, S))
        targets[torch.arange(S)[None, :] >= lengths[:, None]] = 0  # padding, not read
        loss = ctc(log_probs, targets, torch.full((N,), T), lengths)
    else:
        targets = torch.randint(0, C - 1, (int(lengths.sum()),))  # [sum(lengths)]
        loss = F.ctc_loss(
            log_probs,
            targets=targets,
            input_lengths=torch.full((N,), T),
            target_lengths=lengths,
            blank=C - 1,
        )
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
