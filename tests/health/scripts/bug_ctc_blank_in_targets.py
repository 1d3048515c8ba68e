"""Bug: CTC targets padded with 0, the blank, and target_lengths given as the padded width: the
padding is read as labels, each one the blank, which torch takes without an error."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
T, N, C, S = 30, 8, 12, 6  # frames, batch, classes (0: blank), longest target
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, C))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ctc = nn.CTCLoss(blank=0)
for _step in range(120):
    x = torch.randn(T, N, 16)
    lengths = torch.randint(2, S + 1, (N,))
    targets = torch.randint(1, C, (N, S))
    targets[torch.arange(S)[None, :] >= lengths[:, None]] = 0  # padded with the blank
    log_probs = F.log_softmax(model(x), dim=-1)  # [T, N, C]
    loss = ctc(log_probs, targets, torch.full((N,), T), torch.full((N,), S))  # bug: lengths
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
