"""Clean: images scaled and normalised as torchvision's ToTensor and Normalize do, a
segmentation-style second input of 0/1 masks through its own convolution, and a model whose
forward divides its uint8-valued float input by 255 itself before the first convolution."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
images = torch.randint(0, 256, (512, 3, 16, 16), dtype=torch.uint8)
labels = (images[:, 0].float().mean((1, 2)) > 127).long()
mean, std = (
    torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1),
    torch.tensor([0.29] * 3).view(1, 3, 1, 1),
)


class Net(nn.Module):
    def __init__(self, scale_inside: bool) -> None:
        super().__init__()
        self.scale_inside = scale_inside
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.mask_conv = nn.Conv2d(1, 8, 3, padding=1)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.scale_inside:
            x = (x / 255 - mean) / std
        gate = torch.sigmoid(self.mask_conv(mask))  # [B, 8, H, W]: the first convolution
        h = F.relu(self.conv(x)) * gate  # [B, 8, H, W]
        return self.head(h.mean((2, 3)))


for scale_inside in (False, True):
    model = Net(scale_inside)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    for _epoch in range(3):
        for i in range(0, 512, 32):
            raw = images[i : i + 32].float()
            x = raw if scale_inside else (raw / 255 - mean) / std
            mask = (raw[:, :1] > 127).float()
            loss = F.cross_entropy(model(x, mask), labels[i : i + 32])
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("scaled inside" if scale_inside else "scaled outside", round(loss.item(), 3))
