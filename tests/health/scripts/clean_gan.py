"""Clean: a GAN as DCGAN's example writes it: the critic zeroed by D.zero_grad() at the start of
its step, the generator's backward running through the critic (adding to the critic's
gradients, cleared at its next step), generator steps after the critic's."""

import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 2))
D = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
for _step in range(100):
    real = torch.randn(64, 2) * 0.5 + 2.0
    D.zero_grad()
    bce(D(real), torch.ones(64, 1)).backward()
    fake = G(torch.randn(64, 8))
    bce(D(fake.detach()), torch.zeros(64, 1)).backward()
    opt_d.step()
    G.zero_grad()
    bce(D(fake), torch.ones(64, 1)).backward()
    opt_g.step()
print("done")
