"""Bug: a model written as functions over a dict of parameters (no nn.Module of its own), its
weights made with ``torch.full``: every unit of a layer starts as the same unit and, given the
same gradient, stays so. The labels come from a teacher network run once, before training, the
only module the script runs. Accuracy 0.660 after 150 steps (the same model initialised at
random: 0.967). No forward of a module begins these steps: each is opened at the end of the
one before, and so sampled."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(5)
N, D, H, C = 2048, 10, 96, 4
X = torch.randn(N, D)
teacher = nn.Sequential(nn.Linear(D, 32), nn.Tanh(), nn.Linear(32, C))
with torch.no_grad():
    y = teacher(X).argmax(1)

params = {
    "w1": nn.Parameter(torch.full((H, D), 0.05)),
    "b1": nn.Parameter(torch.full((H,), 0.1)),
    "w2": nn.Parameter(torch.full((H, H), 0.05)),
    "b2": nn.Parameter(torch.full((H,), 0.1)),
    "w3": nn.Parameter(torch.full((C, H), 0.05)),
    "b3": nn.Parameter(torch.zeros(C)),
}


def forward(x, p):
    h = F.relu(F.linear(x, p["w1"], p["b1"]))
    h = F.relu(F.linear(h, p["w2"], p["b2"]))
    return F.linear(h, p["w3"], p["b3"])


opt = torch.optim.AdamW(params.values(), lr=3e-3, weight_decay=0.01)
for _step in range(150):
    idx = torch.randint(0, N, (128,))
    loss = F.cross_entropy(forward(X[idx], params), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    out = forward(X, params)
    accuracy = (out.argmax(1) == y).float().mean()
print(f"loss {F.cross_entropy(out, y).item():.3f}, accuracy {accuracy:.3f}")
