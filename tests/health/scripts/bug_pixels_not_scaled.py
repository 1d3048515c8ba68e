"""Bug: 8-bit images turned into floats without the division by 255 (built by hand from a
uint8 array, not through ToTensor): the CNN sees values up to 255, its first layer's outputs
are ~100x what its initialisation expects, and training is slow or unstable."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
images = torch.randint(0, 256, (512, 3, 16, 16), dtype=torch.uint8)  # as decoded from files
labels = (images[:, 0].float().mean((1, 2)) > 127).long()
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)
)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
for epoch in range(6):
    for i in range(0, 512, 32):
        x = images[i : i + 32].float()  # / 255 forgotten
        loss = F.cross_entropy(model(x), labels[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
