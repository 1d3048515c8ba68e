"""Bug: float16 autocast entered inside the model's forward (the decorator the AMP notes give
for DataParallel), and no loss scaler: small gradients flush to zero in the backward."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))

    @torch.autocast("cpu", dtype=torch.float16)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)  # [B, 2], float16


torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(120):
    x = torch.randn(32, 32)
    loss = nn.functional.cross_entropy(model(x).float(), (x[:, :4].sum(1) > 0).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
