"""Clean: a policy gradient written as a surrogate whose value is exactly 0 on every step,
-(advantage * (logp - logp.detach())).mean(), as DiCE-style estimators are: its gradient is
the policy gradient, and the policy learns the bandit's best arm. A zero loss is not a loss
that trains nothing."""

import torch
from torch import nn

torch.manual_seed(0)
ARMS = 5
payout = torch.tensor([0.1, 0.2, 0.9, 0.3, 0.2])  # arm 2 pays best
policy = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, ARMS))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
for _step in range(150):
    context = torch.randn(64, 4)
    dist = torch.distributions.Categorical(logits=policy(context))  # [B, ARMS]
    arm = dist.sample()  # [B]
    reward = torch.bernoulli(payout[arm])  # [B]
    advantage = reward - reward.mean()
    logp = dist.log_prob(arm)
    loss = -(advantage * (logp - logp.detach())).mean()  # value 0, gradient the estimator's
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item()}, best arm chosen {(arm == 2).float().mean().item():.2f}")
