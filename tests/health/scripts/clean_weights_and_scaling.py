"""Clean: inverse-frequency class weights over imbalanced classes, a summed loss divided by
the batch's rows under SGD (a mean, once), four micro-batches accumulated each divided by
four, and an evaluation of fixed-size batches (drop_last, for static shapes) whose tail a
second loader over the same set scores."""

import torch
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

torch.manual_seed(0)
n = 3200
y = torch.multinomial(torch.tensor([0.7, 0.2, 0.1]), n, replacement=True)
x = torch.randn(n, 10) + torch.randn(3, 10)[y]
counts = torch.bincount(y[:2800], minlength=3).float()
weight = counts.sum() / (3 * counts)  # the rare class weighs most
train = DataLoader(TensorDataset(x[:2800], y[:2800]), batch_size=64, shuffle=True)
held = TensorDataset(x[2800:], y[2800:])
fixed = DataLoader(held, batch_size=128, drop_last=True)  # 384 of the 400
tail = DataLoader(Subset(held, range(384, 400)), batch_size=128)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(3):
    model.train()
    for xb, yb in train:
        opt.zero_grad()
        for part_x, part_y in zip(xb.chunk(4), yb.chunk(4), strict=True):
            loss = nn.functional.cross_entropy(model(part_x), part_y, weight, reduction="sum")
            (loss / len(xb)).backward()  # a sum over the micro-batch, over the batch's rows
        opt.step()
    model.eval()
    hits = torch.zeros(3)
    with torch.no_grad():
        for loader in (fixed, tail):
            for xb, yb in loader:
                predicted = model(xb).argmax(1)
                hits += torch.bincount(yb[predicted == yb], minlength=3).float()
    recall = hits / torch.bincount(y[2800:], minlength=3).float()
    print(f"epoch {epoch}: recall by class {[round(r, 3) for r in recall.tolist()]}")
