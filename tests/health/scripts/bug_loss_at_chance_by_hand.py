"""Bug: behaviour cloning from an expert's logged (state, action) pairs whose two arrays were
each shuffled on their own before training, so no state keeps its action. The loss is written
by hand, as policy code often writes it (``-log_softmax(...).gather(...).mean()``, no
cross_entropy call), and sits at ~1.71 all run, the loss of predicting each action as often
as the expert takes it (log(6) = 1.79): the policy learns nothing from the states. ``clean_cross_entropy_by_hand.py`` keeps the pairs and learns."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
states = torch.randn(6000, 12)
expert = torch.randn(12, 6)
actions = (states @ expert).argmax(1)  # the expert's choice in each state
states = states[torch.randperm(6000)]  # bug: shuffled apart from the actions
actions = actions[torch.randperm(6000)]
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
