"""Bug: temporal-difference learning of a value function whose target r + gamma * V(s') is
computed with gradients: each step also moves V(s') towards V(s). The update then minimises the
Bellman residual, which, with random transitions, settles on the wrong values."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
states, gamma = 12, 0.9
transitions = torch.rand(states, states) ** 4
transitions = transitions / transitions.sum(1, keepdim=True)  # random next states
rewards = torch.randn(states)
true_values = torch.linalg.solve(torch.eye(states) - gamma * transitions, rewards)
one_hot = torch.eye(states)
value = nn.Sequential(nn.Linear(states, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(value.parameters(), lr=3e-3)
for _ in range(1500):
    s = torch.randint(0, states, (64,))
    s_next = torch.multinomial(transitions[s], 1).squeeze(1)
    target = rewards[s] + gamma * value(one_hot[s_next]).squeeze(1)  # bug: under torch.no_grad()
    loss = F.mse_loss(value(one_hot[s]).squeeze(1), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    error = (value(one_hot).squeeze(1) - true_values).pow(2).mean().sqrt()
print(f"value error (RMSE) {error:.2f}, values' spread {true_values.std():.2f}")
