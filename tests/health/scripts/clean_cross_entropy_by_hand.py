"""Clean: behaviour cloning from an expert's (state, action) pairs, shuffled together, with
the cross-entropy written by hand (``-log_softmax(...).gather(...).mean()``): read as a
cross-entropy over 6 actions, it falls from log(6) = 1.79 to ~0.44 by step 250."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
states = torch.randn(6000, 12)
expert = torch.randn(12, 6)
actions = (states @ expert).argmax(1)  # the expert's choice in each state
order = torch.randperm(6000)  # shuffled together: each state keeps its action
states, actions = states[order], actions[order]
policy = nn.Sequential(nn.Linear(12, 64), nn.Tanh(), nn.Linear(64, 6))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
for step in range(300):
    batch = torch.randint(0, 6000, (128,))
    log_probs = F.log_softmax(policy(states[batch]), dim=-1)
    loss = -log_probs.gather(-1, actions[batch].unsqueeze(-1)).squeeze(-1).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}")
