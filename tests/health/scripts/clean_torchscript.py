"""Clean: TorchScript, torch.fx and pickle meet the loss functions the doctor wraps. A scripted
module and a scripted focal loss call F.cross_entropy (compiled as in plain python), a partial
of it is pickled with the run's settings, and an fx trace names it."""

import functools
import io
import pickle

import torch
from torch import fx, nn
from torch.nn import functional as F


class WithLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
        self.smooth = nn.CrossEntropyLoss(label_smoothing=0.1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.body(x)  # [B, 3]
        return F.cross_entropy(logits, y) + self.smooth(logits, y)


@torch.jit.script
def focal(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    ce = F.cross_entropy(logits, y, reduction="none")  # [B]
    return ((1 - torch.exp(-ce)) ** 2 * ce).mean()


torch.manual_seed(0)
model = torch.jit.script(WithLoss())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(256, 8), torch.randint(0, 3, (256,))
for step in range(100):
    i = (step * 32) % 256
    loss = model(x[i : i + 32], y[i : i + 32]) + focal(model.body(x[i : i + 32]), y[i : i + 32])
    opt.zero_grad()
    loss.backward()
    opt.step()

settings = functools.partial(F.cross_entropy, label_smoothing=0.1)
buffer = io.BytesIO()
torch.save({"loss_fn": settings}, buffer)
assert pickle.loads(pickle.dumps(F.cross_entropy)) is F.cross_entropy
assert F.cross_entropy.__name__ == "cross_entropy" and F.cross_entropy.__doc__


class Head(nn.Module):
    def forward(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, y)


traced = fx.symbolic_trace(Head())
assert "torch.nn.functional.cross_entropy" in traced.code, traced.code
print(f"loss {loss.item():.4f}")
