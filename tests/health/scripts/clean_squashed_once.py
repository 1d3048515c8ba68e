"""Clean: a mixture of experts whose softmax gate weights each expert's softmax over the
classes; the mixture is a distribution, and torch.log of it goes to F.nll_loss. Two softmaxes
on the way to the loss, with a product between them: each squashes once.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(25)
D, K, E = 10, 5, 4
rules = torch.randn(E, D, K)


def sample(n):
    x = torch.randn(n, D)
    region = (x[:, 0] > 0).long() * 2 + (x[:, 1] > 0).long()
    logits = torch.einsum("nd,ndk->nk", x, rules[region]) * 1.5
    y = torch.distributions.Categorical(logits=logits).sample()
    return x, y


class MixtureOfExperts(nn.Module):
    def __init__(self, n_experts=E, hidden=32):
        super().__init__()
        self.gate = nn.Sequential(nn.Linear(D, 32), nn.Tanh(), nn.Linear(32, n_experts))
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(D, hidden), nn.ReLU(), nn.Linear(hidden, K))
            for _ in range(n_experts)
        )

    def forward(self, x):
        weights = F.softmax(self.gate(x), dim=-1)  # [B, E]
        expert_probs = torch.stack([F.softmax(e(x), dim=-1) for e in self.experts], 1)  # [B, E, K]
        return (weights.unsqueeze(-1) * expert_probs).sum(1)  # [B, K]


x_tr, y_tr = sample(8000)
x_te, y_te = sample(3000)
moe = MixtureOfExperts()
opt = torch.optim.Adam(moe.parameters(), lr=3e-3)
for epoch in range(10):
    moe.train()
    for idx in torch.randperm(len(x_tr)).split(128):
        mix = moe(x_tr[idx])
        loss = F.nll_loss(torch.log(mix + 1e-8), y_tr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    if epoch % 3 == 0:
        print(f"epoch {epoch} nll {loss.item():.4f}")

moe.eval()
with torch.no_grad():
    mix = moe(x_te)
acc = (mix.argmax(-1) == y_te).float().mean().item()
nll = F.nll_loss(torch.log(mix + 1e-8), y_te).item()
print(f"HELDOUT acc={acc:.4f} nll={nll:.4f}")
