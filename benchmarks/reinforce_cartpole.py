"""REINFORCE on a NumPy cart-pole, after pytorch/examples' reinforcement_learning/reinforce.py.

Many tiny operators a step: one optimiser step per episode, one forward of a 4->128->2 policy per
move, episodes that get longer as the policy learns (20 -> 400 moves over 300 episodes). The
workload of `bench_doctor_many_ops.py`; `treeqa doctor -- python benchmarks/reinforce_cartpole.py`.
"""

import argparse
import math
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

p = argparse.ArgumentParser()
p.add_argument("--episodes", type=int, default=300)
p.add_argument("--seed", type=int, default=543)
args = p.parse_args()


class CartPole:
    def __init__(self, rng):
        self.rng = rng

    def reset(self):
        self.s = self.rng.uniform(-0.05, 0.05, 4)
        return self.s.copy()

    def step(self, a):
        x, xd, th, thd = self.s
        force = 10.0 if a == 1 else -10.0
        ct, st = math.cos(th), math.sin(th)
        temp = (force + 0.05 * thd * thd * st) / 1.1
        tha = (9.8 * st - ct * temp) / (0.5 * (4.0 / 3.0 - 0.1 * ct * ct / 1.1))
        xa = temp - 0.05 * tha * ct / 1.1
        x, xd, th, thd = x + 0.02 * xd, xd + 0.02 * xa, th + 0.02 * thd, thd + 0.02 * tha
        self.s = np.array([x, xd, th, thd])
        done = abs(x) > 2.4 or abs(th) > 12 * 2 * math.pi / 360
        return self.s.copy(), 1.0, done


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

    def forward(self, x):
        x = self.dropout(F.relu(self.affine1(x)))
        return F.softmax(self.affine2(x), dim=1)


torch.manual_seed(args.seed)
env = CartPole(np.random.default_rng(args.seed))
policy = Policy()
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
eps = np.finfo(np.float32).eps.item()
running = 10.0
t0 = time.perf_counter()
lengths = []
for _episode in range(args.episodes):
    state, log_probs, rewards = env.reset(), [], []
    for _move in range(1, 500):
        s = torch.from_numpy(state).float().unsqueeze(0)
        probs = policy(s)
        m = torch.distributions.Categorical(probs)
        action = m.sample()
        log_probs.append(m.log_prob(action))
        state, reward, done = env.step(action.item())
        rewards.append(reward)
        if done:
            break
    R, returns = 0.0, []
    for r in rewards[::-1]:
        R = r + 0.99 * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    loss = torch.cat([-lp * R for lp, R in zip(log_probs, returns, strict=True)]).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    lengths.append(len(rewards))
    running = 0.05 * len(rewards) + 0.95 * running
first, last = np.mean(lengths[:50]), np.mean(lengths[-50:])
wall = time.perf_counter() - t0
print(f"{args.episodes} episodes: {first:.1f} moves on average in the first 50, {last:.1f} in")
print(f"the last 50 (running mean {running:.1f}), {wall:.2f} s")
