"""Bug: a vision transformer's class token is made as a plain tensor with requires_grad=True, not
an nn.Parameter: the model does not register it, so the optimiser built from
model.parameters() never updates it (it gets a gradient on every step all the same) and
state_dict() would save the model without it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
D = 32


class ViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(1, D, 4, stride=4)  # [B, 1, 16, 16] -> [B, D, 4, 4]
        self.cls_token = torch.zeros(1, 1, D, requires_grad=True)  # bug: nn.Parameter(...)
        self.pos = nn.Parameter(0.02 * torch.randn(1, 17, D))
        layer = nn.TransformerEncoderLayer(D, 4, 2 * D, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(D, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)  # [B, 16, D]
        t = torch.cat([self.cls_token.expand(len(t), -1, -1), t], 1) + self.pos  # [B, 17, D]
        return self.head(self.encoder(t)[:, 0])


def batch(n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """A bright square in one of the four quadrants; the label is the quadrant."""
    x, y = 0.3 * torch.randn(n, 1, 16, 16), torch.randint(0, 4, (n,))
    for i in range(n):
        r, c = int(y[i]) // 2 * 8 + 2, int(y[i]) % 2 * 8 + 2
        x[i, 0, r : r + 4, c : c + 4] += 1.5
    return x, y


model = ViT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _step in range(100):
    x, y = batch()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.3f}, class token still zero: {not model.cls_token.any()}")
