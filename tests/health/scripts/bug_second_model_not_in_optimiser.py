"""Bug: domain-adversarial training (DANN) whose domain classifier, a model of its own behind a
gradient reversal layer, was left out of the optimiser: it gets gradients at every step and
never changes, so the features are pushed against a classifier that never learns."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


def reverse(x):  # gradient reversal: x forward, -grad backward
    return 2 * x.detach() - x


features = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
labeller = nn.Linear(32, 2)
domains = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam([*features.parameters(), *labeller.parameters()], lr=1e-3)  # bug
source, target = torch.randn(1024, 16), torch.randn(1024, 16) + 0.5
y = (source[:, 0] > 0).long()
for _ in range(100):
    i, j = torch.randint(0, 1024, (64,)), torch.randint(0, 1024, (64,))
    h_source, h_target = features(source[i]), features(target[j])
    task = F.cross_entropy(labeller(h_source), y[i])
    h = reverse(torch.cat([h_source, h_target]))
    domain = F.cross_entropy(domains(h), torch.arange(128) // 64)  # 0 source, 1 target
    loss = task + 0.1 * domain
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(task.item(), 3), round(domain.item(), 3))
