"""Bug (speed): a graph network's messages gathered along its edges as ``h[src]``, whose
backward scatters them back with an accumulating ``index_put_``, slow on a CPU; indexing takes
most of the step. ``h.index_select(0, src)`` (backward: ``index_add_``) does the same faster."""

import torch
from torch import nn

torch.manual_seed(0)
N, E = 2000, 20000
src, dst = torch.randint(0, N, (E,)), torch.randint(0, N, (E,))
x = torch.randn(N, 32)
y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
degree = torch.zeros(N).index_add_(0, dst, torch.ones(E)).clamp_min(1)


class Conv(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.message, self.root = nn.Linear(d_in, d_out), nn.Linear(d_in, d_out)

    def forward(self, h):  # h [N, d_in]
        sent = self.message(h)[src]  # slow: [E, d_out] by advanced indexing
        mean = torch.zeros(N, sent.shape[1]).index_add_(0, dst, sent) / degree[:, None]
        return mean + self.root(h)


model = nn.Sequential(Conv(32, 64), nn.ReLU(), Conv(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for _step in range(60):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(loss.item(), 3))
