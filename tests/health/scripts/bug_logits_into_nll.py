"""Bug: NLLLoss on raw logits (log_softmax forgotten): the loss is minus the target's logit and
falls without bound."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.NLLLoss()
for _step in range(100):
    x = torch.randn(32, 20)
    loss = criterion(model(x), x[:, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
