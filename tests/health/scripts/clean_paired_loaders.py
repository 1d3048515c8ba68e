"""Clean: inputs and targets drawn from two DataLoaders in ways that keep them together or
need them apart: two loaders over paired sets that do not shuffle, two drawn in one shuffled
order (a sampler they share), a source domain's labelled batches
zipped with a target domain's unlabelled ones (domain adaptation, both shuffled, as many
examples each), and mixup of one loader's batches with another pass of its own."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 4))
with torch.no_grad():
    features = torch.randn(1500, 20)
    labels = teacher(features).argmax(1)
x_train, y_train = features[:1000], labels[:1000]


def fit(model, batches, epochs):
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _epoch in range(epochs):
        for x, y in batches():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return (model(features[1000:]).argmax(1) == labels[1000:]).float().mean().item()


def net():
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))


# Two loaders over paired sets, in order.
xs = DataLoader(TensorDataset(x_train), batch_size=50)
ys = DataLoader(TensorDataset(y_train), batch_size=50)
score = fit(net(), lambda: ((x, y) for (x,), (y,) in zip(xs, ys, strict=True)), 3)
print(f"in order {score:.2f}")

# Two loaders drawn in one shuffled order, a sampler they share.
order = torch.randperm(1000).tolist()
xs = DataLoader(x_train, batch_size=50, sampler=order)
ys = DataLoader(y_train, batch_size=50, sampler=order)
score = fit(net(), lambda: zip(xs, ys, strict=True), 3)
print(f"one order {score:.2f}")

# Domain adaptation: labelled source batches beside unlabelled target ones, both shuffled.
source = DataLoader(TensorDataset(x_train, y_train), batch_size=50, shuffle=True)
target = DataLoader(features[:1000] * 1.5 + 0.5, batch_size=50, shuffle=True)
encoder, head = nn.Sequential(nn.Linear(20, 64), nn.ReLU()), nn.Linear(64, 4)
critic = nn.Linear(64, 1)
opt = torch.optim.Adam([*encoder.parameters(), *head.parameters(), *critic.parameters()], 3e-3)
for _epoch in range(3):
    for (xs_, ys_), xt in zip(source, target, strict=True):
        hs, ht = encoder(xs_), encoder(xt)
        domains = torch.cat([torch.zeros(len(hs)), torch.ones(len(ht))])
        domain = F.binary_cross_entropy_with_logits(critic(torch.cat([hs, ht]))[:, 0], domains)
        loss = F.cross_entropy(head(hs), ys_) + 0.1 * domain
        opt.zero_grad()
        loss.backward()
        opt.step()
print("domain adaptation trained")

# Mixup of a loader's batches with another pass over the same set.
one = DataLoader(TensorDataset(x_train, y_train), batch_size=50, shuffle=True)
two = DataLoader(TensorDataset(x_train, y_train), batch_size=50, shuffle=True)
model = net()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _epoch in range(3):
    for (x1, y1), (x2, y2) in zip(one, two, strict=True):
        mix = 0.7
        out = model(mix * x1 + (1 - mix) * x2)
        loss = mix * F.cross_entropy(out, y1) + (1 - mix) * F.cross_entropy(out, y2)
        opt.zero_grad()
        loss.backward()
        opt.step()
print("mixup trained")
