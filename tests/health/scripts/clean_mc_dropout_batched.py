"""Clean: Monte Carlo dropout (Gal and Ghahramani) with its samples batched into one forward: a
network whose only mode-dependent layers are dropouts is run in train mode under no_grad on
each test batch repeated 20 times, row by row (repeat_interleave) and as a whole (repeat); its
predictive mean and spread are read off the copies. Nothing else changes in train mode."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2000, 10)
y = (x[:, :3].sum(1) + 0.5 * torch.randn(2000) > 0).long()
test = torch.randn(300, 10)
model = nn.Sequential(
    nn.Linear(10, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.2),
    nn.Linear(64, 2),
)  # fmt: skip
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
T = 20


def mc_predict(rows, tiled):
    model.train()  # dropout on, on purpose
    means = []
    with torch.no_grad():
        for batch in rows.split(50):
            copies = batch.repeat(T, 1) if tiled else batch.repeat_interleave(T, 0)
            probs = model(copies).softmax(-1)  # [T * 50, 2]
            shaped = probs.view(T, len(batch), 2).transpose(0, 1) if tiled else probs.view(-1, T, 2)
            means.append(shaped.mean(1))
    return torch.cat(means)


for step in range(120):
    batch = torch.randint(0, 2000, (64,))
    loss = F.cross_entropy(model(x[batch]), y[batch])
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 40 == 39:
        mean = mc_predict(test, tiled=step % 80 == 39)
        print(
            f"step {step}: loss {loss.item():.3f}, mean confidence {mean.max(1).values.mean():.3f}"
        )
