"""Clean: one model's weights through several optimisers, each new one a phase. Folds whose
model is reset in place after their optimiser is made (reset_parameters), loaded from a copy
of its first weights, or copied back through .data (which no version counter sees); a model
made anew for each fold; then two-phase fine-tuning (the head alone, then everything under a
new optimiser) that scores a fixed validation set and its training rows (in eval mode) after
each phase; an optimiser remade every epoch with the training rows scored after each; and a
second task learned after the first, the first task's training rows scored after it (how much
was kept)."""

import copy

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
N = 480
x = torch.randn(N, 12)
y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()


def make_model():
    return nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 3))


def train(model, opt, rows, steps):
    model.train()
    for _step in range(steps):
        batch = rows[torch.randint(len(rows), (32,))]
        loss = F.cross_entropy(model(x[batch]), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def accuracy(model, rows):
    model.eval()
    with torch.no_grad():
        return (model(x[rows]).argmax(1) == y[rows]).float().mean().item()


folds = torch.randperm(N).chunk(4)
model = make_model()
first = copy.deepcopy(model.state_dict())
for k in range(5):
    held_out = folds[k % 4]
    rows = torch.cat([folds[j] for j in range(4) if j != k % 4])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if k == 1:
        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()
    elif k == 2:
        for p, p0 in zip(model.parameters(), first.values(), strict=True):
            p.data.copy_(p0)
    else:
        model.load_state_dict(first)
    loss = train(model, opt, rows, 40)
    print(f"fold {k} (one model, reset): loss {loss:.3f}, accuracy {accuracy(model, held_out):.3f}")
for k in range(2):
    held_out = folds[k]
    rows = torch.cat([folds[j] for j in range(4) if j != k])
    fresh = make_model()
    loss = train(fresh, torch.optim.SGD(fresh.parameters(), lr=0.1), rows, 40)
    print(f"fold {k} (a new model): loss {loss:.3f}, accuracy {accuracy(fresh, held_out):.3f}")

validation, rows = folds[0], torch.cat(folds[1:])
tuned = make_model()
for p in tuned[0].parameters():
    p.requires_grad_(False)
train(tuned, torch.optim.Adam(tuned[2].parameters(), lr=3e-3), rows, 40)
print(f"head alone: {accuracy(tuned, validation):.3f} ({accuracy(tuned, rows):.3f} on training)")
for p in tuned.parameters():
    p.requires_grad_(True)
for phase in range(3):
    train(tuned, torch.optim.Adam(tuned.parameters(), lr=1e-3), rows, 40)
    print(
        f"phase {phase}: {accuracy(tuned, validation):.3f} ({accuracy(tuned, rows):.3f} training)"
    )
for epoch in range(4):
    train(tuned, torch.optim.SGD(tuned.parameters(), lr=0.05, momentum=0.9), rows, 15)
    print(f"epoch {epoch}: training rows {accuracy(tuned, rows):.3f}")

task_a = (x, y)
second = torch.randn(N, 12)
x, y = second, (second[:, 4:7].sum(1) > 0).long()  # task B: other rows, other labels
train(tuned, torch.optim.Adam(tuned.parameters(), lr=3e-3), torch.arange(N), 40)
print(f"task B: {accuracy(tuned, torch.arange(N)):.3f}")
x, y = task_a
print(f"task A kept: {accuracy(tuned, rows):.3f} on its training rows")
