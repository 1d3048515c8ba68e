"""Bug: MSELoss of a prediction [N, 1] against a target [N]: torch broadcasts both to [N, N]
and the model learns the mean target (torch warns once; the run goes on)."""

import warnings

import torch
from torch import nn

warnings.simplefilter("ignore")  # as a busy log would bury it
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.MSELoss()
for _step in range(100):
    x = torch.randn(32, 20)
    y = x[:, 0] - x[:, 1]  # [32]
    loss = criterion(model(x), y)  # [32, 1] against [32]
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
