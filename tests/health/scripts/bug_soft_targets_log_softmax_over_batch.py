"""Bug: mixup with a soft-target cross-entropy written by hand, its log_softmax over dim 0 (the
batch) where the classes are dim 1: each class's score is normalised against the other
examples', and the loss sums over the classes something that is no log-probability of them."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(4096, 20)
y = (x[:, :5] @ torch.randn(5, 10)).argmax(1)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def soft_cross_entropy(logits, target):
    return torch.sum(-target * F.log_softmax(logits, dim=0), dim=-1).mean()  # bug: dim=0


for _step in range(60):
    i = torch.randint(0, 4096, (64,))
    lam = float(torch.distributions.Beta(0.4, 0.4).sample())
    j = torch.randperm(64)
    xb = lam * x[i] + (1 - lam) * x[i][j]
    target = lam * F.one_hot(y[i], 10).float() + (1 - lam) * F.one_hot(y[i][j], 10).float()
    loss = soft_cross_entropy(model(xb), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
