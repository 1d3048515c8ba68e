"""Bug: a speech-style model's softmax output given to ctc_loss, which takes log-probabilities:
the loss is computed over log-probabilities that are not, and the model trains toward noise."""

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
    probs = F.softmax(model(x), dim=-1)  # [T, N, C]  bug: log_softmax
    loss = ctc(probs, targets, torch.full((N,), T), torch.full((N,), S))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
