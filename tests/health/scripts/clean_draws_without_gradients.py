"""Clean: draws taken with sample() where no gradient should pass through them, beside a VAE
that draws its latent with rsample(): a Gaussian policy's actions, scored by their
log-probability (REINFORCE) and fed to a critic the same optimiser trains; latents drawn from a
frozen encoder to train a decoder of its own; a learned prior's samples decoded for the log
every 50 steps."""

import torch
from torch import nn
from torch.distributions import Normal, kl_divergence
from torch.nn import functional as F

torch.manual_seed(0)
data = torch.tanh(torch.randn(2000, 2) @ torch.randn(2, 16))
encoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
decoder = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 16))
prior_mu = nn.Parameter(torch.zeros(2))
policy = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
critic = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
frozen_encoder = nn.Sequential(nn.Linear(16, 4))  # trained elsewhere; no optimiser steps it
student_decoder = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 16))
opt = torch.optim.Adam(
    [
        *encoder.parameters(),
        *decoder.parameters(),
        prior_mu,
        *policy.parameters(),
        *critic.parameters(),
        *student_decoder.parameters(),
    ],
    lr=1e-3,
)
best_action = torch.tensor([0.5, -0.3])
for step in range(300):
    x = data[torch.randint(0, len(data), (64,))]
    mu, log_var = encoder(x).chunk(2, 1)
    posterior = Normal(mu, (0.5 * log_var).exp())
    kl = kl_divergence(posterior, Normal(prior_mu, 1.0)).sum(1).mean()
    vae_loss = F.mse_loss(decoder(posterior.rsample()), x) + 0.01 * kl

    state = torch.randn(64, 4)
    actions = Normal(policy(state), 0.3)
    action = actions.sample()
    reward = -(action - best_action).pow(2).sum(1)
    value = critic(torch.cat([state, action], 1)).squeeze(1)
    advantage = (reward - value).detach()
    policy_loss = -(actions.log_prob(action).sum(1) * advantage).mean()
    critic_loss = F.mse_loss(value, reward)

    with torch.no_grad():
        t_mu, t_log_var = frozen_encoder(x).chunk(2, 1)
    latent = Normal(t_mu, (0.5 * t_log_var).exp()).sample()
    student_loss = F.mse_loss(student_decoder(latent), x)

    loss = vae_loss + policy_loss + critic_loss + student_loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        spread = decoder(Normal(prior_mu, 1.0).sample((8,))).std().item()
        print(f"step {step}: loss {loss.item():.3f}, samples' spread {spread:.3f}")
print(f"policy's mean action {policy(torch.zeros(1, 4)).detach().squeeze().tolist()}")
