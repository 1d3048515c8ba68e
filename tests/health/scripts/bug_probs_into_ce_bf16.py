"""Bug: a model cast to bfloat16 ends in softmax and its output goes into CrossEntropyLoss.
A bfloat16 softmax's rows sum to 1 only within ~0.003 (8-bit probabilities)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10), nn.Softmax(dim=-1))
model = model.to(torch.bfloat16)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for _step in range(20):
    x = torch.randn(64, 20, dtype=torch.bfloat16)
    loss = criterion(model(x), x[:, :10].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
