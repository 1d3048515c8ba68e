"""Bug: a GAN whose generator is never zeroed (G.zero_grad() left out): the critic's steps are
fine, but each generator step adds its gradient to all the generator's earlier ones."""

import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 2))
D = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
for _step in range(200):
    real = torch.randn(64, 2) * 0.5 + 2.0
    D.zero_grad()
    bce(D(real), torch.ones(64, 1)).backward()
    fake = G(torch.randn(64, 8))
    bce(D(fake.detach()), torch.zeros(64, 1)).backward()
    opt_d.step()
    bce(D(fake), torch.ones(64, 1)).backward()  # G.zero_grad() forgotten
    opt_g.step()
print("done")
