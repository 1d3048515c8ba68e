"""Clean: models whose inputs hold something like their target, none of them a label left
among the features (``target-in-features``). A classifier given a test's verdict that agrees
with the label on 98% of the rows; an ArcFace head given the one-hot label for its margin; a
model given its labels [B, 2] that computes its loss on one of them; a forecaster of the next
value from the values before it; an auxiliary head that reconstructs one input feature, its
loss added to the main one."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
ROWS, FEATURES, CLASSES = 4096, 8, 6
x = torch.randn(ROWS, FEATURES)
label = (x[:, :3] @ torch.tensor([1.0, -1.0, 0.5]) > 0).long()  # [ROWS]: two classes
verdict = torch.where(torch.rand(ROWS) < 0.98, label, 1 - label).float()  # a test's: 98% right
kind = (x[:, 3] * 2 + x[:, 4]).floor().clamp(-3, 2).long() + 3  # [ROWS]: six classes


def train(model, loss_of, steps=60):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _step in range(steps):
        rows = torch.randint(0, ROWS, (64,))
        loss = loss_of(model, rows)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def mlp(inputs, outputs):
    return nn.Sequential(nn.Linear(inputs, 32), nn.ReLU(), nn.Linear(32, outputs))


def with_verdict(model, rows):  # the verdict a column beside the features
    return F.cross_entropy(model(torch.cat([x[rows], verdict[rows, None]], 1)), label[rows])


class ArcFace(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = mlp(FEATURES, 16)
        self.centres = nn.Parameter(torch.randn(CLASSES, 16))

    def forward(self, features, one_hot):  # the margin goes to each row's own class
        cosine = F.normalize(self.embed(features)) @ F.normalize(self.centres).T  # [B, CLASSES]
        return 16 * (cosine - 0.2 * one_hot)


class Labelled(nn.Module):  # given its labels, as a model(**batch) with labels= is
    def __init__(self):
        super().__init__()
        self.net = mlp(FEATURES, CLASSES)

    def forward(self, features, labels):  # labels [B, 2]: the kind, and the label
        return F.cross_entropy(self.net(features), labels[:, 0])


series = torch.sin(torch.arange(20000) * 0.05) + 0.1 * torch.randn(20000)


def forecast(model, rows):  # 8 values, then the next one
    windows = torch.stack([series[i : i + 9] for i in rows.tolist()])  # [B, 9]
    return F.mse_loss(model(windows[:, :8]).squeeze(1), windows[:, 8])


class Auxiliary(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head, self.aux = mlp(FEATURES, 32), nn.Linear(32, 2), nn.Linear(32, 1)

    def forward(self, features):
        h = F.relu(self.body(features))
        return self.head(h), self.aux(h).squeeze(1)


def auxiliary(model, rows):
    logits, reconstructed = model(x[rows])
    return F.cross_entropy(logits, label[rows]) + 0.1 * F.mse_loss(reconstructed, x[rows, 0])


print(f"verdict beside the features: {train(mlp(FEATURES + 1, 2), with_verdict):.3f}")
arcface = ArcFace()
print(
    f"ArcFace: {train(arcface, lambda m, r: F.cross_entropy(m(x[r], F.one_hot(kind[r], CLASSES)), kind[r])):.3f}"
)
labels = torch.stack([kind, label], 1)
print(f"labels given: {train(Labelled(), lambda m, r: m(x[r], labels[r])):.3f}")
print(f"forecast: {train(mlp(8, 1), forecast):.3f}")
print(f"auxiliary reconstruction: {train(Auxiliary(), auxiliary):.3f}")
