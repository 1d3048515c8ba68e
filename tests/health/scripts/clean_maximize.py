"""Clean: maximize=True on purpose, on the objective to maximise (the mean log-likelihood of
the labels, the negated cross-entropy): it rises towards 0 as the model learns."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3, maximize=True)
x = torch.randn(2048, 20)
y = x[:, :5].argmax(1)
for _step in range(200):
    i = torch.randint(0, 2048, (32,))
    log_likelihood = -F.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    log_likelihood.backward()
    opt.step()
print("log-likelihood", round(log_likelihood.item(), 3))
