"""Bug: a VAE that draws its latent with sample(), which runs under torch.no_grad: the
reconstruction loss sends no gradient back to the encoder's mean and variance, so the encoder
learns from the KL term alone and the decoder from noise."""

import torch
from torch import nn
from torch.distributions import Normal, kl_divergence
from torch.nn import functional as F

torch.manual_seed(0)
data = torch.tanh(torch.randn(3000, 2) @ torch.randn(2, 16)) + 0.05 * torch.randn(3000, 16)
train, test = data[:2500], data[2500:]


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
        self.decoder = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 16))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Normal]:
        mu, log_var = self.encoder(x).chunk(2, 1)
        posterior = Normal(mu, (0.5 * log_var).exp())
        z = posterior.sample()  # bug: posterior.rsample()
        return self.decoder(z), posterior


model = VAE()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
prior = Normal(0.0, 1.0)
for _ in range(600):
    x = train[torch.randint(0, len(train), (64,))]
    reconstruction, posterior = model(x)
    kl = kl_divergence(posterior, prior).sum(1).mean()
    loss = F.mse_loss(reconstruction, x, reduction="none").sum(1).mean() + 0.1 * kl
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    mu, _ = model.encoder(test).chunk(2, 1)
    error = F.mse_loss(model.decoder(mu), test)
print(f"held-out reconstruction error {error:.4f}")
