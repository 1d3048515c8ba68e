"""Clean: gradients taken with torch.autograd.grad in a loss three ways: a WGAN-GP critic's
penalty with create_graph=True (its gradient reaches the critic), an input gradient without it
used as data (an FGSM adversarial example, x + eps * grad.sign(), for the classifier's second
loss term), and the critic's gradient norm without it, printed, not added."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
critic = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))
classifier = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam([*critic.parameters(), *classifier.parameters()], 1e-3, betas=(0.5, 0.9))
for step in range(120):
    real, fake = 0.5 * torch.randn(64, 2) + 2, 0.5 * torch.randn(64, 2)
    eps = torch.rand(64, 1)
    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
    (grads,) = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
    penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()
    x = torch.cat([real, fake]).requires_grad_(True)
    y = torch.cat([torch.ones(64), torch.zeros(64)]).long()
    (input_grad,) = torch.autograd.grad(F.cross_entropy(classifier(x), y), x)
    adversarial = (x + 0.1 * input_grad.sign()).detach()  # data, not a term of the loss
    loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
    loss = loss + F.cross_entropy(classifier(x), y) + F.cross_entropy(classifier(adversarial), y)
    opt.zero_grad()
    loss.backward()
    norms = torch.autograd.grad(critic(real).mean(), list(critic.parameters()))
    opt.step()
    if step % 40 == 0:
        print(
            f"loss {loss.item():.3f}, critic's gradient norm {torch.stack([g.norm() for g in norms]).norm():.3f}"
        )
