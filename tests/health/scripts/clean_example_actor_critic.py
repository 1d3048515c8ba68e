"""Clean: pytorch/examples' reinforcement_learning/actor_critic.py on a NumPy cart-pole
(episodes capped at 100 moves): one model with an actor head (softmax) and a critic head, the
(log-prob, value) pairs saved as it acts, the episode's loss the summed policy losses
(``-log_prob * advantage``) plus the critic's smooth L1 losses, Adam at 3e-2 once per
episode."""

import math
from collections import namedtuple
from itertools import count

import numpy as np
import torch
from torch import nn, optim
from torch.distributions import Categorical
from torch.nn import functional as F


class CartPole:
    """CartPole-v1's dynamics: 1 reward a move until the pole falls or the cart leaves."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

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


SavedAction = namedtuple("SavedAction", ["log_prob", "value"])


class Policy(nn.Module):
    """implements both actor and critic in one model"""

    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.action_head = nn.Linear(128, 2)  # actor's layer
        self.value_head = nn.Linear(128, 1)  # critic's layer
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_prob = F.softmax(self.action_head(x), dim=-1)
        state_values = self.value_head(x)
        return action_prob, state_values


torch.manual_seed(543)
env = CartPole(543)
model = Policy()
optimizer = optim.Adam(model.parameters(), lr=3e-2)
eps = np.finfo(np.float32).eps.item()
gamma = 0.99


def select_action(state):
    state = torch.from_numpy(state).float()
    probs, state_value = model(state)
    m = Categorical(probs)
    action = m.sample()
    model.saved_actions.append(SavedAction(m.log_prob(action), state_value))
    return action.item()


def finish_episode():
    R = 0
    saved_actions = model.saved_actions
    policy_losses = []  # list to save actor (policy) loss
    value_losses = []  # list to save critic (value) loss
    returns = []  # list to save the true values
    for r in model.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for (log_prob, value), R in zip(saved_actions, returns, strict=True):
        advantage = R - value.item()
        policy_losses.append(-log_prob * advantage)
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
    optimizer.zero_grad()
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
    loss.backward()
    optimizer.step()
    del model.rewards[:]
    del model.saved_actions[:]


running_reward = 10
for i_episode in count(1):
    state, ep_reward = env.reset(), 0
    for _t in range(1, 100):
        action = select_action(state)
        state, reward, done = env.step(action)
        model.rewards.append(reward)
        ep_reward += reward
        if done:
            break
    running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
    finish_episode()
    if i_episode % 10 == 0:
        print(
            f"Episode {i_episode}\tLast reward: {ep_reward:.2f}\tAverage reward: {running_reward:.2f}"
        )
    if running_reward > 90 or i_episode == 90:
        print(f"Stopped at episode {i_episode}, running reward {running_reward:.2f}")
        break
