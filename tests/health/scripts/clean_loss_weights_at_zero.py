"""Clean: loss terms weighted by 0 on purpose or for a while: a KL weight warmed up as a float
(0.0 at the first step only), an auxiliary term switched off by a flag (False), a lazy
regulariser weighted by the integer 1 once in 16 steps and 0 on the others, and the 0.0 * sum
of the parameters that DistributedDataParallel scripts add to put unused ones in the graph."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.tanh(torch.randn(3000, 4) @ torch.randn(4, 20))


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 16))
        self.decoder = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 20))
        self.unused_head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, logvar = self.encoder(x).chunk(2, -1)  # [B, 8] each
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.decoder(z), mu, logvar


model = VAE()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
warmup, use_sparsity = 100, False
for step in range(150):
    batch = x[torch.randint(0, 3000, (128,))]
    reconstruction, mu, logvar = model(batch)
    recon = F.mse_loss(reconstruction, batch, reduction="sum") / len(batch)
    kl = -0.5 * (1 + logvar - mu**2 - logvar.exp()).sum() / len(batch)
    beta = min(1.0, step / warmup)
    lazy = int(step % 16 == 8)  # a lazy regulariser, weighted 1 once in 16 steps
    loss = recon + beta * kl + use_sparsity * mu.abs().mean() + lazy * 1e-3 * logvar.pow(2).mean()
    loss = loss + 0.0 * sum(p.sum() for p in model.unused_head.parameters())
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} reconstruction {recon.item():.3f} kl {kl.item():.3f}")
