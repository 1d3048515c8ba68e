"""Clean: the optimiser step fused into the backward, as PyTorch's tutorial writes it to save
memory: one optimiser per parameter, stepped and zeroed by a hook as its gradient is
accumulated, and a loop that only calls backward(). The clock's step ends inside the backward."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
optimizers = {p: torch.optim.Adam([p], lr=1e-3, foreach=False) for p in model.parameters()}


def step_in_backward(parameter: torch.Tensor) -> None:
    optimizers[parameter].step()
    optimizers[parameter].zero_grad()


for p in model.parameters():
    p.register_post_accumulate_grad_hook(step_in_backward)
for _step in range(120):
    x = torch.randn(32, 16)
    y = x[:, :4].argmax(1)
    F.cross_entropy(model(x), y).backward()
print("done")
