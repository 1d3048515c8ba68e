"""Clean: a BYOL-style target network kept beside the online one, not inside it: a deep copy,
frozen, run under ``no_grad`` in train mode (its batch norm on purpose), and updated after every
step by ``target.data.mul_(tau).add_(online.data, alpha=1 - tau)``, which moves its values
without moving its version counter or its storage. frozen-in-train-mode read it as a frozen
teacher before moved weights were told by their values too."""

import copy

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
protos = torch.randn(20, 32)


def augment(x):
    return x * (1 + 0.2 * torch.randn_like(x)) + 0.3 * torch.randn_like(x)


def mlp(d_in, d_out):
    return nn.Sequential(
        nn.Linear(d_in, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, d_out)
    )


online = nn.Sequential(mlp(32, 32), mlp(32, 32))  # encoder and projector
predictor = mlp(32, 32)
target = copy.deepcopy(online)
for p in target.parameters():
    p.requires_grad = False
opt = torch.optim.Adam([*online.parameters(), *predictor.parameters()], lr=1e-3)
tau = 0.99
for step in range(1, 161):
    x = protos[torch.randint(0, 20, (64,))]
    v1, v2 = augment(x), augment(x)
    p1, p2 = predictor(online(v1)), predictor(online(v2))
    with torch.no_grad():
        z1, z2 = target(v1), target(v2)
    loss = (2 - 2 * F.cosine_similarity(p1, z2, dim=-1)).mean()
    loss = loss + (2 - 2 * F.cosine_similarity(p2, z1, dim=-1)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            t.data.mul_(tau).add_(o.data, alpha=1 - tau)
    if step % 40 == 0:
        print(f"step {step} loss {loss.item():.4f}")
