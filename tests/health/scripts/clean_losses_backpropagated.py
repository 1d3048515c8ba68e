"""Clean: losses that all reach a backward, or were never meant to. Each step sums the losses of
four micro-batches before one backward; a first forward with gradients scores a larger batch to
pick the hardest examples (online hard example mining), whose losses pick and are not trained
on; the micro-batches' losses by class are logged beside the one trained; and a truncated
backpropagation through time gives each chunk of a sequence its own backward."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
features = torch.randn(4000, 10)
labels = (features @ torch.randn(10, 4)).argmax(1)
model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 4))
rnn, readout = nn.GRU(3, 16, batch_first=True), nn.Linear(16, 1)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
rnn_opt = torch.optim.Adam([*rnn.parameters(), *readout.parameters()], lr=3e-3)
series = torch.cumsum(torch.randn(8, 400, 3), 1) * 0.1
for step in range(120):
    pool = torch.randint(0, 3500, (256,))
    scores = F.cross_entropy(model(features[pool]), labels[pool], reduction="none")
    hardest = pool[scores.detach().topk(128).indices]
    total = 0.0
    for part in hardest.chunk(4):
        out = model(features[part])
        by_class = [
            F.cross_entropy(out[labels[part] == c], labels[part][labels[part] == c])
            for c in range(4)
            if (labels[part] == c).any()
        ]
        total = total + F.cross_entropy(out, labels[part]) / 4
    opt.zero_grad()
    total.backward()
    opt.step()
    if step % 40 == 0:
        print(
            f"step {step}: loss {total.item():.3f}, by class {[round(c.item(), 2) for c in by_class]}"
        )
state = None
for start in range(0, 399 - 20, 20):  # a sequence in chunks of 20, a backward each
    chunk, target = series[:, start : start + 20], series[:, start + 1 : start + 21, :1]
    out, state = rnn(chunk, state)
    state = state.detach()
    rnn_loss = F.mse_loss(readout(out), target)
    rnn_opt.zero_grad()
    rnn_loss.backward()
    rnn_opt.step()
with torch.no_grad():
    accuracy = (model(features[3500:]).argmax(1) == labels[3500:]).float().mean()
print(f"held-out accuracy {accuracy:.2f}, last chunk's loss {rnn_loss.item():.4f}")
