"""Clean: REINFORCE with a leave-one-out baseline on a sparse-reward bandit. Actions are sampled
with torch.bernoulli(probs), whose derivative is zero, and the policy learns through the
sampled actions' log-probabilities; while no sample of a group is rewarded every advantage is
exactly 0, and so is every gradient: no zero-derivative op's doing."""

import torch
from torch import nn

torch.manual_seed(0)
CONTEXTS, BITS, K = 32, 10, 8  # contexts, bits an action, samples a context (the RLOO group)
codes = torch.randint(0, 2, (CONTEXTS, BITS)).float()
policy = nn.Sequential(nn.Linear(CONTEXTS, 64), nn.Tanh(), nn.Linear(64, BITS))
opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
for _step in range(120):
    idx = torch.randint(0, CONTEXTS, (4,))
    x = torch.eye(CONTEXTS)[idx].repeat_interleave(K, 0)  # [4K, CONTEXTS]
    target = codes[idx].repeat_interleave(K, 0)
    probs = torch.sigmoid(policy(x)).clamp(1e-4, 1 - 1e-4)
    actions = torch.bernoulli(probs)
    logp = (actions * probs.log() + (1 - actions) * (1 - probs).log()).sum(-1)
    with torch.no_grad():
        reward = ((actions != target).sum(-1) <= 1).float().view(4, K)
        baseline = (reward.sum(1, keepdim=True) - reward) / (K - 1)
        advantage = (reward - baseline).view(-1)
    loss = -(advantage * logp).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
