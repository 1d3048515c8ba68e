"""Clean: loaders used the usual ways: one step per epoch of a small loader read to its end
(gradients accumulated over it), an epoch loop over a shuffled loader, a second loader drawn
from by hand with next(it) and a new iterator when it runs out, a one-batch validation loader
iterated after every step, and next(iter(loader)) on a shuffled loader without workers (a
random batch, cheaply). (The heaviest steps come first: no step-time-regression by design.)"""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(512, 20)
data = TensorDataset(x, x[:, :5].argmax(1))
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def step(inputs: torch.Tensor, labels: torch.Tensor, scale: float = 1.0) -> None:
    (F.cross_entropy(model(inputs), labels) * scale).backward()


train = DataLoader(data, batch_size=32, shuffle=True)
extra = DataLoader(data, batch_size=16)
valid = DataLoader(TensorDataset(x[:64], x[:64, :5].argmax(1)), batch_size=64)
small = DataLoader(TensorDataset(x[:96], x[:96, :5].argmax(1)), batch_size=32)
for _epoch in range(30):  # one step per epoch, over every batch
    opt.zero_grad()
    for inputs, labels in small:
        step(inputs, labels, 1 / 3)
    opt.step()
extra_it = iter(extra)
for _epoch in range(3):
    for inputs, labels in train:
        try:
            more, more_labels = next(extra_it)
        except StopIteration:
            extra_it = iter(extra)
            more, more_labels = next(extra_it)
        opt.zero_grad()
        step(inputs, labels)
        step(more, more_labels, 0.5)
        opt.step()
        model.eval()
        with torch.no_grad():
            for v, _ in valid:
                model(v)
        model.train()
for _step in range(30):
    inputs, labels = next(iter(train))  # shuffled, no workers: a random batch
    opt.zero_grad()
    step(inputs, labels)
    opt.step()
print("done")
