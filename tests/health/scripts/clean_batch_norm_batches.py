"""Clean: batch norms given batches they can normalise: 16 images a batch, the epoch's last
batch holding one (257 images); a backbone's batch norms frozen in eval mode while its head is
fine-tuned one image at a time; GroupNorm and a batch norm without running statistics at one
image a batch."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x_train, y_train = torch.randn(257, 3, 8, 8), torch.randint(0, 3, (257,))


def block(norm):
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), norm, nn.ReLU(), nn.AdaptiveAvgPool2d(1))


batched = nn.Sequential(block(nn.BatchNorm2d(8)), nn.Flatten(), nn.Linear(8, 3))
opt = torch.optim.SGD(batched.parameters(), lr=0.05)
for _epoch in range(6):
    order = torch.randperm(257)
    for start in range(0, 257, 16):
        rows = order[start : start + 16]
        loss = F.cross_entropy(batched(x_train[rows]), y_train[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()

backbone = block(nn.BatchNorm2d(8)).eval().requires_grad_(False)  # frozen, as detectors tune
singles = nn.ModuleDict(
    {
        "group": block(nn.GroupNorm(2, 8)),
        "no_running": block(nn.BatchNorm2d(8, track_running_stats=False)),
        "head": nn.Linear(24, 3),
    }
)
opt = torch.optim.Adam(singles.parameters(), lr=1e-3)
for _step in range(100):
    i = torch.randint(0, 257, (1,))
    x = x_train[i]
    features = [backbone(x), singles["group"](x), singles["no_running"](x)]
    loss = F.cross_entropy(singles["head"](torch.cat(features, 1).flatten(1)), y_train[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"last loss {loss.item():.2f}")
