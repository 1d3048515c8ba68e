"""Bug: a second model trained after the first, in one script, never zeroes its gradients.
The first model and its optimiser stay alive, so the second optimiser takes over as the clock
after 9 steps; 150 steps at the default --every 50 give only two sampled steps after that
unless the second run's first steps are sampled as a run's first are."""

import torch
from torch import nn

torch.manual_seed(0)
W = torch.randn(10, 3)

first = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
first_opt = torch.optim.Adam(first.parameters(), lr=1e-3)
for _step in range(100):
    x = torch.randn(32, 10)
    loss = nn.functional.cross_entropy(first(x), (x @ W).argmax(1))
    first_opt.zero_grad()
    loss.backward()
    first_opt.step()

second = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 3))
second_opt = torch.optim.SGD(second.parameters(), lr=0.01, momentum=0.9)
for _step in range(150):
    x = torch.randn(32, 10)
    loss = nn.functional.cross_entropy(second(x), (x @ W).argmax(1))
    loss.backward()  # BUG: second_opt.zero_grad() is never called
    second_opt.step()
print(f"{loss.item():.3f}")
