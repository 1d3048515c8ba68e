"""Clean: after each step a fixed probe batch is drawn with torch.manual_seed(1234) inside
torch.random.fork_rng, which restores the generator after it: training draws stay fresh."""

import torch
from torch import nn

torch.manual_seed(0)
gen = nn.Sequential(nn.Linear(8, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 2))
opt = torch.optim.Adam(gen.parameters(), lr=1e-3)
probes = []
for _ in range(120):
    loss = gen(torch.randn(256, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(1234)
        probes.append(gen(torch.randn(16, 8)).mean().item())
print(round(probes[-1], 4))
