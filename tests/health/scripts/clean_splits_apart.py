"""Clean: evaluations over rows split apart from the training ones, or over training rows on
purpose: one random_split into training and validation sets, the training accuracy read on part
of the training set, a last score over every row, samplers over disjoint index lists, and a
k-fold loop with a model of its own for each fold."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset, SubsetRandomSampler, TensorDataset, random_split

torch.manual_seed(0)
features = torch.randn(1000, 10)
labels = (features[:, :3].sum(1) > 0).long()
data = TensorDataset(features, labels)


def accuracy(model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    with torch.no_grad():
        right = sum((model(x).argmax(1) == y).sum().item() for x, y in loader)
    model.train()
    return right / len(loader.sampler)


def train(train_loader: DataLoader, epochs: int) -> nn.Module:
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(epochs):
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


train_set, val_set = random_split(data, [800, 200], generator=torch.Generator().manual_seed(1))
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(4):
    for x, y in train_loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    seen = accuracy(model, DataLoader(Subset(train_set, range(200)), batch_size=100))
    held_out = accuracy(model, DataLoader(val_set, batch_size=100))
    print(f"epoch {epoch}: training accuracy {seen:.2f}, validation accuracy {held_out:.2f}")
print(f"accuracy over every row {accuracy(model, DataLoader(data, batch_size=250)):.2f}")

order = torch.randperm(1000)
train_idx, val_idx = order[:800], order[800:]
model = train(DataLoader(data, batch_size=32, sampler=SubsetRandomSampler(train_idx)), 3)
val_loader = DataLoader(data, batch_size=100, sampler=SubsetRandomSampler(val_idx))
print(f"sampled split: validation accuracy {accuracy(model, val_loader):.2f}")

folds = torch.randperm(1000).chunk(5)
for k, fold in enumerate(folds):
    rest = torch.cat([f for i, f in enumerate(folds) if i != k])
    model = train(DataLoader(Subset(data, rest), batch_size=32, shuffle=True), 1)
    print(
        f"fold {k}: accuracy {accuracy(model, DataLoader(Subset(data, fold), batch_size=100)):.2f}"
    )
