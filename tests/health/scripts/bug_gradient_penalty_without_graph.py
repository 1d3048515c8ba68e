"""Bug: a WGAN-GP critic whose gradient penalty takes torch.autograd.grad without
create_graph=True: the gradients come back as plain tensors, so the penalty has no graph and
adds a constant to the critic's loss. The loss reads as penalised; the critic is not."""

import torch
from torch import nn

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
critic = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))
opt_g = torch.optim.Adam(generator.parameters(), 1e-3, betas=(0.5, 0.9))
opt_c = torch.optim.Adam(critic.parameters(), 1e-3, betas=(0.5, 0.9))


def gradient_penalty(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    eps = torch.rand(len(real), 1)
    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)  # [B, 2]
    (grads,) = torch.autograd.grad(critic(mixed).sum(), mixed)  # bug: create_graph=True
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


for step in range(150):
    real = 0.5 * torch.randn(64, 2) + 2
    fake = generator(torch.randn(64, 4)).detach()
    loss_c = critic(fake).mean() - critic(real).mean() + 10 * gradient_penalty(real, fake)
    opt_c.zero_grad()
    loss_c.backward()
    opt_c.step()
    if step % 5 == 0:
        loss_g = -critic(generator(torch.randn(64, 4))).mean()
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
print(f"critic loss {loss_c.item():.3f}")
