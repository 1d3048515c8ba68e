"""Clean: a least-squares GAN (Mao et al. 2017) on a ring of eight Gaussians. Its losses are
mean squared errors against targets held at one value (ones for real, zeros for fake); the
generator's hovers at 0.45-0.51 from step 100 on, as it should while the two play each other
out. Targets with no spread within a batch are not a regression's: no level of predicting
their mean is read for them (the ones and zeros pooled would put it at 0.25)."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
angles = torch.arange(8) * 2 * math.pi / 8
centres = torch.stack((angles.cos(), angles.sin()), 1) * 2


def real_batch(n: int) -> torch.Tensor:
    return centres[torch.randint(0, 8, (n,))] + 0.05 * torch.randn(n, 2)


generator = nn.Sequential(
    nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2)
)
discriminator = nn.Sequential(
    nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)
)
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999))
for step in range(600):
    real = real_batch(128)
    fake = generator(torch.randn(128, 8))
    ones, zeros = torch.ones(128, 1), torch.zeros(128, 1)
    d_loss = 0.5 * (
        F.mse_loss(discriminator(real), ones) + F.mse_loss(discriminator(fake.detach()), zeros)
    )
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = F.mse_loss(discriminator(fake), ones)
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    if step % 100 == 0:
        print(f"step {step} d {d_loss.item():.4f} g {g_loss.item():.4f}")
