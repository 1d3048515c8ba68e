"""Clean: losses whose targets have gradients, rightly. A GAN's generator matches the critic's
features of real images, computed through the critic its optimiser does not step; a
physics-informed network's residual, whose two sides come from one forward, and a periodic
boundary condition between two of its outputs; a value function's target from a target
network whose weights are copied in, not trained."""

import math

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)

# A GAN trained with feature matching.
generator = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 8))
critic = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
critic_head = nn.Linear(32, 1)
opt_d = torch.optim.Adam([*critic.parameters(), *critic_head.parameters()], lr=1e-3)
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3)
real = torch.randn(512, 8) + 2
for _ in range(80):
    x = real[torch.randint(0, 512, (32,))]
    fake = generator(torch.randn(32, 4))
    d_real, d_fake = critic_head(critic(x)), critic_head(critic(fake.detach()))
    loss_d = F.binary_cross_entropy_with_logits(d_real, torch.ones_like(d_real))
    loss_d = loss_d + F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake))
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = F.mse_loss(critic(fake).mean(0), critic(x).mean(0))
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
print(f"generated mean {generator(torch.randn(256, 4)).mean():.2f} (real 2.00)")

# A physics-informed network for u' = cos(2 pi x) on [0, 1], u periodic, u(0) = 0.
u = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(u.parameters(), lr=1e-2)
for _ in range(200):
    x = torch.rand(64, 1, requires_grad=True)
    out = u(x)
    (du,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    residual = F.mse_loss(du, torch.cos(2 * math.pi * x) + 0 * out)
    periodic = F.mse_loss(u(torch.zeros(1, 1)), u(torch.ones(1, 1)))
    anchor = u(torch.zeros(1, 1)).pow(2).mean()
    loss = residual + periodic + anchor
    opt.zero_grad()
    loss.backward()
    opt.step()
exact = torch.sin(2 * math.pi * torch.tensor([[0.25]])) / (2 * math.pi)
print(f"u(0.25) {u(torch.tensor([[0.25]])).item():.3f} (exact {exact.item():.3f})")

# Temporal-difference learning with a target network run with gradients.
states, gamma = 12, 0.9
transitions = torch.rand(states, states) ** 4
transitions = transitions / transitions.sum(1, keepdim=True)
rewards = torch.randn(states)
one_hot = torch.eye(states)
value = nn.Sequential(nn.Linear(states, 32), nn.ReLU(), nn.Linear(32, 1))
target_value = nn.Sequential(nn.Linear(states, 32), nn.ReLU(), nn.Linear(32, 1))
target_value.load_state_dict(value.state_dict())
opt = torch.optim.Adam(value.parameters(), lr=3e-3)
for step in range(200):
    s = torch.randint(0, states, (64,))
    s_next = torch.multinomial(transitions[s], 1).squeeze(1)
    target = rewards[s] + gamma * target_value(one_hot[s_next]).squeeze(1)
    loss = F.mse_loss(value(one_hot[s]).squeeze(1), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        target_value.load_state_dict(value.state_dict())
print(f"value loss {loss.item():.3f}")
