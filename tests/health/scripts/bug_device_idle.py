"""Bug (slow, info): a GPU kept waiting by its host. A deep stack of small layers at batch 8:
each step launches hundreds of tiny kernels, and the host's Python and launch work, not the
GPU, sets the step time (needs a CUDA device; a larger batch, torch.compile or fewer layers
would give the GPU more work per launch)."""

import torch
from torch import nn

torch.manual_seed(0)
device = torch.device("cuda")
blocks = [nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.ReLU()) for _ in range(24)]
model = nn.Sequential(*blocks, nn.Linear(64, 2)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)  # kernels per parameter
for _step in range(150):
    x = torch.randn(8, 64, device=device)
    loss = nn.functional.cross_entropy(model(x), (x[:, :4].sum(1) > 0).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
