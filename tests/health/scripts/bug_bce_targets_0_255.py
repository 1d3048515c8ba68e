"""Bug: a segmentation mask read as bytes (0 or 255) given to BCEWithLogitsLoss as it is: its
targets are no probabilities, and the loss, unbounded below, goes negative and falls for ever
as the logits grow."""

import torch
from torch import nn

torch.manual_seed(0)
images = torch.rand(256, 1, 16, 16)
masks = (images > 0.5).to(torch.uint8) * 255  # as a PNG mask is read
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.BCEWithLogitsLoss()
for _step in range(60):
    i = torch.randint(0, 256, (16,))
    loss = criterion(model(images[i]), masks[i].float())  # bug: not masks / 255
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
