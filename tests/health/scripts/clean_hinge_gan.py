"""Clean: a GAN with hinge losses, each optimiser zeroing its own gradients before its
backward. The critic's last bias gets the sum of +1 for each fake and -1 for each real in the
hinge's active terms: often exactly zero, which a probe on it read as cleared before both of
the step's backwards (zero-grad-per-micro-batch) while the weights' gradients carried over."""

import torch
from torch import nn

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 1))
critic = nn.Sequential(nn.Linear(1, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.9))
opt_c = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
for step in range(150):
    real = 3 + 0.5 * torch.randn(64, 1)
    fake = generator(torch.randn(64, 4))
    loss_c = torch.relu(1 - critic(real)).mean() + torch.relu(1 + critic(fake.detach())).mean()
    opt_c.zero_grad()
    loss_c.backward()
    opt_c.step()
    loss_g = -critic(fake).mean()
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    if step % 50 == 0:
        print(f"step {step}: critic {loss_c.item():.3f}, fakes' mean {fake.mean().item():.2f}")
