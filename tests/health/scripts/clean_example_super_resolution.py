"""Clean: pytorch/examples' super_resolution, shrunk to 8x8 -> 24x24 synthetic crops: four
convolutions (orthogonal init with ReLU's gain) ending in PixelShuffle, the luminance channel in
[0, 1] as ToTensor gives it, MSELoss, Adam at lr=0.01; a test pass under no_grad that reports
PSNR."""

from math import log10

import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.nn import init
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor**2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))  # [B, 1, r * H, r * W]

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv4.weight)


def crops(n: int, generator: torch.Generator) -> TensorDataset:
    """Smooth 24x24 luminance crops in [0, 1] and their 8x8 bicubic downscales."""
    coarse = torch.rand(n, 1, 6, 6, generator=generator)
    target = F.interpolate(coarse, size=24, mode="bilinear", align_corners=False).clamp(0, 1)
    input = F.interpolate(target, size=8, mode="bicubic", align_corners=False).clamp(0, 1)
    return TensorDataset(input, target)


def train(epoch):
    epoch_loss = 0.0
    for iteration, (input, target) in enumerate(training_data_loader, 1):
        optimizer.zero_grad()
        loss = criterion(model(input), target)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()
        if iteration % 10 == 0:
            print(
                f"===> Epoch[{epoch}]({iteration}/{len(training_data_loader)}): Loss: {loss.item():.4f}"
            )
    print(f"===> Epoch {epoch} Complete: Avg. Loss: {epoch_loss / len(training_data_loader):.4f}")


def test():
    avg_psnr = 0.0
    with torch.no_grad():
        for input, target in testing_data_loader:
            mse = criterion(model(input), target)
            avg_psnr += 10 * log10(1 / mse.item())
    print(f"===> Avg. PSNR: {avg_psnr / len(testing_data_loader):.4f} dB")


torch.manual_seed(123)
g = torch.Generator().manual_seed(123)
training_data_loader = DataLoader(crops(640, g), batch_size=16, shuffle=True)
testing_data_loader = DataLoader(crops(64, g), batch_size=16)
model = Net(upscale_factor=3)
criterion = nn.MSELoss()
optimizer = optim.Adam(model.parameters(), lr=0.01)
for epoch in range(1, 4):
    train(epoch)
    test()
