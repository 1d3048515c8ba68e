"""Bug: a learnable temperature kept outside the model, in the optimiser beside the model's
parameters, while the loop clears gradients with model.zero_grad(): the temperature's gradient
is never cleared and each step adds to all earlier ones."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
log_temperature = nn.Parameter(torch.zeros(()))
opt = torch.optim.Adam([*model.parameters(), log_temperature], lr=1e-3)
for _step in range(100):
    x = torch.randn(32, 20)
    loss = F.cross_entropy(model(x) / log_temperature.exp(), x[:, :5].argmax(1))
    model.zero_grad()  # the temperature is not in the model
    loss.backward()
    opt.step()
print("done")
