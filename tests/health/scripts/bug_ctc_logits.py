"""Bug: a speech-style model's raw logits given to ctc_loss, which takes log-probabilities:
the loss falls without bound as the logits grow."""

import torch
from torch import nn

torch.manual_seed(0)
T, N, C, S = 30, 8, 12, 6  # frames, batch, classes (0: blank), target length
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, C))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ctc = nn.CTCLoss(blank=0)
for _step in range(40):
    x = torch.randn(T, N, 16)
    targets = torch.randint(1, C, (N, S))
    logits = model(x)  # [T, N, C]  bug: log_softmax forgotten
    loss = ctc(logits, targets, torch.full((N,), T), torch.full((N,), S))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
