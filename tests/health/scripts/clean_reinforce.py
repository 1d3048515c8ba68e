"""Clean: REINFORCE, one optimiser step per episode, as pytorch/examples' reinforce.py does.

Episodes get longer as training goes (here on a fixed schedule, so the run is the same every
time: in the example the pole stays up longer as the policy learns), so each step runs more
forwards and takes longer: more work a step, not a step that got slower.
"""

import math

import torch
from torch import nn


class Walk:
    """A point on a line pushed left or right; an episode lasts ``length`` moves."""

    def __init__(self, seed: int):
        self.rng = torch.Generator().manual_seed(seed)

    def reset(self, length: int) -> torch.Tensor:
        self.left, self.x = length, torch.rand(4, generator=self.rng) - 0.5  # [4]
        return self.x

    def step(self, action: int) -> tuple[torch.Tensor, float, bool]:
        self.x = 0.9 * self.x + (0.1 if action else -0.1)  # [4]
        self.left -= 1
        return self.x, -math.fabs(float(self.x[0])), self.left == 0


torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
env = Walk(0)
for episode in range(120):
    state, log_probs, rewards, done = env.reset(length=6 + episode // 2), [], [], False
    while not done:
        probs = torch.softmax(policy(state[None]), dim=-1)  # [1, 2]
        dist = torch.distributions.Categorical(probs)
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        state, reward, done = env.step(int(action))
        rewards.append(reward)
    returns, ret = [], 0.0
    for reward in reversed(rewards):
        ret = reward + 0.99 * ret
        returns.insert(0, ret)
    g = torch.tensor(returns)  # [T]
    g = (g - g.mean()) / (g.std() + 1e-8)
    loss = -(torch.cat(log_probs) * g).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("last episode", len(rewards), "moves")
