"""Clean: the batch size doubles every 100 steps (32, 64, 128, 256), a batch-size warm-up as
large-batch recipes use: steps get slower because each does more work, at the same autograd
nodes a step; the elements given to the model grow as much."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 3)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(400):
    batch = 32 * 2 ** (step // 100)
    x = torch.randn(batch, 64)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
