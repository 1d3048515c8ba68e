"""Bug: a hand-written attention block passes its dropout rate to scaled_dot_product_attention
whatever the mode: dropout_p has no training flag, so evaluation drops attention weights too."""

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, dim: int, p: float) -> None:
        super().__init__()
        self.qkv, self.out, self.p = nn.Linear(dim, 3 * dim), nn.Linear(dim, 5), p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # [B, T, D] each
        h = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p)  # bug: self.training
        return self.out(h.mean(1))  # [B, 5]


torch.manual_seed(0)
model = Attention(16, 0.2)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(60):
    x = torch.randn(32, 6, 16)
    loss = F.cross_entropy(model(x), x[:, 0, :5].argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 19:
        model.eval()
        with torch.no_grad():
            accuracy = (model(x).argmax(1) == x[:, 0, :5].argmax(1)).float().mean()
        model.train()
print("done")
