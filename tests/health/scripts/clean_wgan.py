"""Clean: a WGAN whose generator (batch norm, train mode) steps first, then makes fakes under
no_grad for each of five critic steps: training-time samples, not an evaluation."""

import torch
from torch import nn

torch.manual_seed(0)
gen = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
critic = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))
opt_g = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.5, 0.9))
opt_c = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
for _ in range(100):
    g_loss = -critic(gen(torch.randn(64, 8))).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    for _critic_step in range(5):
        with torch.no_grad():
            fake = gen(torch.randn(64, 8))
        c_loss = critic(fake).mean() - critic(torch.randn(64, 2) + 3).mean()
        opt_c.zero_grad()
        c_loss.backward()
        opt_c.step()
        for p in critic.parameters():
            p.data.clamp_(-0.05, 0.05)
print(round(g_loss.item(), 3))
