"""Clean: a scaled cosine classifier without a margin (NormFace: s * cos(h, w_c)), whose first
loss sits above log(C) by its scale, by design; its classes' directions a parameter."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
centres = 2.5 * torch.randn(8, 20)
labels = torch.randint(0, 8, (4000,))
x = centres[labels] + torch.randn(4000, 20)


class CosineClassifier(nn.Module):
    def __init__(self, scale: float = 16.0):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 32))
        self.directions = nn.Parameter(torch.randn(8, 32))  # [C, D]
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.normalize(self.body(x), dim=-1)  # [B, D]
        return self.scale * h @ F.normalize(self.directions, dim=-1).T  # [B, C]


model = CosineClassifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(100):
    batch = torch.randint(0, 4000, (64,))
    loss = F.cross_entropy(model(x[batch]), labels[batch])
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 25 == 0:
        print(f"step {step} loss {loss.item():.3f}")
