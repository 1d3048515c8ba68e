"""Clean: set regression pooled by a learned query in nn.MultiheadAttention, whose 0/1 keep mask
is turned into an additive float mask, (1 - keep) * -1e9, before it is given as
key_padding_mask: a float mask, but one that hides the padding.
"""

import numpy as np
import torch
from torch import nn

np.random.seed(25)
torch.manual_seed(25)
FEAT, MAXSET = 6, 64


def sample_sets(n):
    sets = []
    for _ in range(n):
        items = np.random.randn(np.random.randint(4, 25), FEAT).astype(np.float32)
        items[:, 0] = np.random.uniform(1.0, 3.0, size=len(items))
        sets.append(items)
    return sets, np.array([s[:, 0].mean() for s in sets], dtype=np.float32)


def to_padded(sets, size=None):
    size = size or max(len(s) for s in sets)
    x = np.zeros((len(sets), size, FEAT), dtype=np.float32)
    keep = np.zeros((len(sets), size), dtype=np.float32)
    for i, s in enumerate(sets):
        x[i, : len(s)] = s
        keep[i, : len(s)] = 1.0
    return torch.from_numpy(x), torch.from_numpy(keep)


class Pool(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(FEAT, d), nn.ReLU(), nn.Linear(d, d))
        self.seed = nn.Parameter(torch.randn(1, 1, d))
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.rho = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1))

    def forward(self, x, keep):
        h = self.phi(x)
        pad_bias = (1.0 - keep) * -1e9
        out, _ = self.attn(self.seed.expand(len(x), -1, -1), h, h, key_padding_mask=pad_bias)
        return self.rho(out[:, 0]).squeeze(-1)


tr, tr_y = sample_sets(3000)
te, te_y = sample_sets(1000)
model = Pool()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, 5, 0.5)
for _epoch in range(12):
    model.train()
    order = np.random.permutation(len(tr))
    for i in range(0, len(order), 64):
        idx = order[i : i + 64]
        x, keep = to_padded([tr[j] for j in idx])
        loss = nn.functional.mse_loss(model(x, keep), torch.from_numpy(tr_y[idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    sched.step()
model.eval()
with torch.no_grad():
    x, keep = to_padded(te, MAXSET)
    mse64 = nn.functional.mse_loss(model(x, keep), torch.from_numpy(te_y)).item()
    x, keep = to_padded(te)
    mse_b = nn.functional.mse_loss(model(x, keep), torch.from_numpy(te_y)).item()
print(f"HELDOUT mse_pad64={mse64:.4f} mse_batchpad={mse_b:.4f} target_var={te_y.var():.4f}")
