"""Bug: under a loss scaler, NaN gradients look like overflows: every step is skipped.

The distance feature sqrt(sum of squares) has no eps, and the padded rows are all zeros: the
loss is finite, but the gradient of sqrt at 0 is 0 * inf = NaN. The scaler takes each NaN for
an overflow, skips the step and halves the scale, so the model never trains.
"""

import torch
from torch import nn

torch.manual_seed(0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.out = nn.Linear(9, 2)

    def forward(self, x):
        h = self.proj(x) * (x.abs().sum(1, keepdim=True) > 0)  # padded rows stay zero
        distance = h.float().pow(2).sum(1, keepdim=True).sqrt()  # bug: no eps
        return self.out(torch.cat([h, distance.to(h.dtype)], 1))


model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for _step in range(40):
    x = torch.randn(32, 8)
    x[::4] = 0.0  # padding
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
print("loss", loss.item(), "scale", scaler.get_scale())
