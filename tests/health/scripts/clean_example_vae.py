"""Clean: pytorch/examples' vae, shrunk to 14x14 synthetic images in [0, 1]: an MLP encoder to
a mean and log-variance, the reparameterisation trick, a sigmoid decoder; the loss is the
reconstruction's binary cross-entropy summed over pixels and batch plus the KL divergence, so
it is thousands at the start and its chance level is no log(C); Adam at 1e-3; a test pass and
samples drawn under no_grad each epoch."""

import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(196, 100)
        self.fc21 = nn.Linear(100, 10)
        self.fc22 = nn.Linear(100, 10)
        self.fc3 = nn.Linear(10, 100)
        self.fc4 = nn.Linear(100, 196)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 196))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 196), reduction="sum")
    # see Appendix B from VAE paper: Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def images(n: int, generator: torch.Generator) -> TensorDataset:
    """Blurred strokes of ten kinds, in [0, 1] as ToTensor gives them."""
    strokes = (torch.rand(10, 1, 14, 14, generator=torch.Generator().manual_seed(0)) > 0.75).float()
    y = torch.randint(0, 10, (n,), generator=generator)
    x = F.avg_pool2d(strokes[y], 3, 1, 1) + 0.1 * torch.rand(n, 1, 14, 14, generator=generator)
    return TensorDataset(x.clamp(0, 1), y)


def train(epoch):
    model.train()
    train_loss = 0.0
    for batch_idx, (data, _) in enumerate(train_loader):
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
        if batch_idx % 20 == 0:
            print(f"Train Epoch: {epoch} [{batch_idx}]\tLoss: {loss.item() / len(data):.6f}")
    print(f"====> Epoch: {epoch} Average loss: {train_loss / len(train_loader.dataset):.4f}")


def test(epoch):
    model.eval()
    test_loss = 0.0
    with torch.no_grad():
        for data, _ in test_loader:
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
    print(f"====> Test set loss: {test_loss / len(test_loader.dataset):.4f}")


torch.manual_seed(1)
g = torch.Generator().manual_seed(1)
train_loader = DataLoader(images(1280, g), batch_size=32, shuffle=True)
test_loader = DataLoader(images(256, g), batch_size=32)
model = VAE()
optimizer = optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(1, 4):
    train(epoch)
    test(epoch)
    with torch.no_grad():
        sample = model.decode(torch.randn(16, 10)).view(16, 1, 14, 14)
