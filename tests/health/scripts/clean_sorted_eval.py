"""Clean: data stored class by class, trained the usual ways: batches sliced by hand through
a permutation (before any DataLoader), a shuffled training loader, an
evaluation loss over a loader without shuffling over sorted data every 2 steps (its batches
one class each, as is fine for evaluation), and a second phase whose loader does not shuffle data that
was shuffled once in advance (mixed batches). Regression targets sorted by value are not read
as classes."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(1600, 20)
y = x[:, :5].argmax(1)
order = torch.argsort(y, stable=True)
x, y = x[order], y[order]  # sorted by label, as read from disk
train = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
valid = DataLoader(TensorDataset(x[::20], y[::20]), batch_size=16)  # sorted, not shuffled
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
perm = torch.randperm(len(x))
for i in range(0, 30 * 32, 32):  # by hand, shuffled
    rows = perm[i : i + 32]
    loss = F.cross_entropy(model(x[rows]), y[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
step = 0
for _epoch in range(2):
    for inputs, labels in train:
        loss = F.cross_entropy(model(inputs), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 2 == 0:
            model.eval()
            with torch.no_grad():
                valid_loss = sum(float(F.cross_entropy(model(v), t)) for v, t in valid)
            model.train()
    print(f"epoch {_epoch}: valid loss {valid_loss / len(valid):.3f}")
mixed = torch.randperm(len(x))  # shuffled once, in advance
presorted = DataLoader(TensorDataset(x[mixed], y[mixed]), batch_size=32)
for inputs, labels in presorted:
    loss = F.cross_entropy(model(inputs), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
target = x.sum(1, keepdim=True)
by_value = torch.argsort(target[:, 0])
regression = DataLoader(TensorDataset(x[by_value], target[by_value]), batch_size=32)
head = nn.Linear(20, 1)
opt2 = torch.optim.SGD(head.parameters(), lr=0.01)
for inputs, t in regression:
    loss = F.mse_loss(head(inputs), t)
    opt2.zero_grad()
    loss.backward()
    opt2.step()
print("done")
