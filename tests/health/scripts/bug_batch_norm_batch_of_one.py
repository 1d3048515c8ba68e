"""Bug: a small CNN with batch norms trained one image at a time. In training mode each
batch norm normalises the image by its own statistics (an instance norm), in eval mode by
running averages over many images, which training never used: held out in eval mode 0.61
after 600 steps, where nn.GroupNorm (the same in both modes) gives 1.00 (and the batch-norm
model in training mode, given 200 images at once, 0.74)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


def data(n):
    y = torch.randint(0, 4, (n,))
    x = torch.randn(n, 3, 16, 16) * 0.5
    for i in range(n):  # a bright band: its channel and half say the class
        c = y[i].item()
        x[i, c % 3, (c // 3) * 8 : (c // 3) * 8 + 8, :] += 1.0
    return x, y


x_train, y_train = data(2000)
x_test, y_test = data(500)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.BatchNorm2d(16),  # bug: one image a batch; nn.GroupNorm(4, 16)
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1),
    nn.BatchNorm2d(32),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(32, 4),
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(600):
    i = torch.randint(0, 2000, (1,))
    loss = F.cross_entropy(model(x_train[i]), y_train[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
print(f"held-out accuracy in eval mode {accuracy:.2f}")
