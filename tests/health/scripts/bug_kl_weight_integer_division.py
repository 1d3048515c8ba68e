"""Bug: a VAE whose KL weight warms up by integer division, min(1, step // warmup): 0 for
every step before the warm-up ends, longer here than the run, so the KL term is multiplied by
0 all run long and the model trains as a plain autoencoder (its KL grows unchecked)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.tanh(torch.randn(3000, 4) @ torch.randn(4, 20))  # data on a 4-d manifold in 20-d


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 16))
        self.decoder = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 20))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, logvar = self.encoder(x).chunk(2, -1)  # [B, 8] each
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.decoder(z), mu, logvar


model = VAE()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
warmup = 1000
for step in range(200):
    batch = x[torch.randint(0, 3000, (128,))]
    reconstruction, mu, logvar = model(batch)
    recon = F.mse_loss(reconstruction, batch, reduction="sum") / len(batch)
    kl = -0.5 * (1 + logvar - mu**2 - logvar.exp()).sum() / len(batch)
    beta = min(1, step // warmup)  # bug: step / warmup
    loss = recon + beta * kl
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} reconstruction {recon.item():.3f} kl {kl.item():.3f}")
