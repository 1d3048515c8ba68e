"""Bug: Monte Carlo dropout by model.train() on a network with batch norm: the test batches'
copies run in train mode move the running statistics (momentum 0.1) toward the test data, 30
batches each evaluation, and the model evaluated afterwards is not the one that trained."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2000, 10)
y = (x[:, :3].sum(1) > 0).long()
test = torch.randn(300, 10) * 2 + 1  # shifted: its statistics differ from the training data's
model = nn.Sequential(
    nn.Linear(10, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 2)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(120):
    batch = torch.randint(0, 2000, (64,))
    loss = F.cross_entropy(model(x[batch]), y[batch])
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 40 == 39:
        model.train()  # bug: for the dropout, and the batch norm updates too
        with torch.no_grad():
            probs = [model(b.repeat_interleave(20, 0)).softmax(-1) for b in test.split(10)]
        print(
            f"step {step}: loss {loss.item():.3f}, mean running var {model[1].running_var.mean():.3f}"
        )
