"""Clean: the look-alikes of batch-mixing slips done per example: a batch-first GRU, a
LayerNorm, centring over time (x - x.mean(1)), attention pooling with a softmax over time, a
running cumsum over time and a cosine head (F.normalize(dim=-1)); the held-out set, stored class
by class, scores the same one example at a time as in batches of 32.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(31)
LEN, CH, N_CLS = 40, 3, 4
PATTERNS = torch.randn(N_CLS, CH, 6)


def series(n_per, g):
    xs, ys = [], []
    for c in range(N_CLS):
        x = torch.randn(n_per, LEN, CH, generator=g) + 3.0 * torch.randn(n_per, 1, CH, generator=g)
        starts = torch.randint(0, LEN - 6, (n_per,), generator=g)
        for i in range(n_per):
            s = int(starts[i])
            x[i, s : s + 6] += 1.2 * PATTERNS[c].t()
        xs.append(x)
        ys.append(torch.full((n_per,), c))
    return torch.cat(xs), torch.cat(ys)


class EventNet(nn.Module):
    def __init__(self, h=48):
        super().__init__()
        self.gru = nn.GRU(2 * CH, h, batch_first=True)
        self.norm = nn.LayerNorm(h)
        self.score = nn.Linear(h, 1)
        self.proj = nn.Linear(h, 32)
        self.protos = nn.Parameter(torch.randn(N_CLS, 32))

    def forward(self, x):  # [batch, time, ch]
        x = x - x.mean(dim=1, keepdim=True)  # remove each series' own offset
        drift = torch.cumsum(x, dim=1) / LEN  # running sum along time
        h, _ = self.gru(torch.cat([x, drift], dim=-1))
        h = self.norm(h)
        w = torch.softmax(self.score(h).squeeze(-1), dim=1)  # attention over time steps
        pooled = (w.unsqueeze(-1) * h).sum(1)
        z = F.normalize(self.proj(pooled), dim=-1)
        return 12.0 * z @ F.normalize(self.protos, dim=-1).t()


g = torch.Generator().manual_seed(5)
x_tr, y_tr = series(600, g)
x_te, y_te = series(150, g)
model = EventNet()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(6):
    model.train()
    perm = torch.randperm(len(x_tr))
    tot = 0.0
    for i in range(0, len(perm), 32):
        j = perm[i : i + 32]
        loss = F.cross_entropy(model(x_tr[j]), y_tr[j])
        opt.zero_grad()
        loss.backward()
        opt.step()
        tot += loss.item() * len(j)
    print(f"epoch {epoch} loss {tot / len(x_tr):.4f}")

model.eval()
with torch.no_grad():
    p1 = torch.cat([model(x_te[i : i + 32]).argmax(1) for i in range(0, len(x_te), 32)])
    perm = torch.randperm(len(x_te))
    p2 = torch.empty_like(p1)
    p2[perm] = torch.cat(
        [model(x_te[perm][i : i + 1]).argmax(1) for i in range(0, len(x_te))]
    )  # batch of 1
print(
    f"held-out accuracy {(p1 == y_te).float().mean().item():.4f}; changed by order: {(p1 != p2).float().mean().item():.4f}"
)
