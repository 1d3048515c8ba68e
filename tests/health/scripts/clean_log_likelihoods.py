"""Clean: log-likelihoods in losses with their signs right. A BPR recommender minimises
-logsigmoid(pos - neg); then a classifier head maximises its log-likelihood written by hand,
log_softmax(x).gather(y).mean(), with an optimiser made with maximize=True; a policy gradient
minimises -(logp * advantage).mean()."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
USERS, ITEMS, D = 100, 80, 16
chosen = torch.randint(0, ITEMS, (USERS, 8))  # the items each user chose
users, items = nn.Embedding(USERS, D), nn.Embedding(ITEMS, D)
opt = torch.optim.Adam([*users.parameters(), *items.parameters()], lr=1e-2)
for _step in range(100):
    u = torch.randint(0, USERS, (256,))
    pos = chosen[u, torch.randint(0, 8, (256,))]
    neg = torch.randint(0, ITEMS, (256,))
    loss = -F.logsigmoid((users(u) * (items(pos) - items(neg))).sum(1)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"bpr loss {loss.item():.3f}")

head = nn.Linear(D, 4)
opt = torch.optim.Adam(head.parameters(), lr=1e-2, maximize=True)
for _step in range(100):
    x = torch.randn(128, D)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    log_likelihood = F.log_softmax(head(x), 1).gather(1, y[:, None]).mean()
    opt.zero_grad()
    log_likelihood.backward()
    opt.step()
print(f"log-likelihood {log_likelihood.item():.3f}")

policy = nn.Linear(4, 3)
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
for _step in range(100):
    state = torch.randn(64, 4)
    dist = torch.distributions.Categorical(logits=policy(state))
    action = dist.sample()
    advantage = (action == state.argmax(1).clamp(max=2)).float() - 0.33
    loss = -(
        F.log_softmax(policy(state), 1).gather(1, action[:, None]).squeeze(1) * advantage
    ).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"policy loss {loss.item():.3f}")
