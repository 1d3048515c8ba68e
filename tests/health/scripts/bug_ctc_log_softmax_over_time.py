"""Bug: a speech-style model's log_softmax taken over dim 0 of its [T, N, C] output, the frames,
not the classes: ctc_loss gets log-probabilities of each class normalised across time."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
T, N, C, S = 30, 8, 12, 6  # frames, batch, classes (0: blank), target length
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, C))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ctc = nn.CTCLoss(blank=0)
for _step in range(40):
    x = torch.randn(T, N, 16)
    targets = torch.randint(1, C, (N, S))
    log_probs = F.log_softmax(model(x), dim=0)  # [T, N, C]  bug: dim=-1, the classes
    loss = ctc(log_probs, targets, torch.full((N,), T), torch.full((N,), S))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
