"""Bug: predictions kept as [N, 1] (argmax with keepdim=True) compared with targets of shape
[N] by pred.eq(target): the comparison broadcasts to [N, N], every prediction against every
target, so the accuracy is the share of agreeing pairs, about 1/4 on four classes, whatever
the model learned."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
centres = torch.randn(4, 12) * 2
labels = torch.randint(0, 4, (2400,))
features = centres[labels] + torch.randn(2400, 12)
train = DataLoader(TensorDataset(features[:2000], labels[:2000]), batch_size=40, shuffle=True)
val = DataLoader(TensorDataset(features[2000:], labels[2000:]), batch_size=100)
model = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(3):
    model.train()
    for data, target in train:
        loss = F.cross_entropy(model(data), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    scores, true = [], 0
    with torch.no_grad():
        for data, target in val:
            pred = model(data).argmax(dim=1, keepdim=True)
            scores.append(pred.eq(target).float().mean().item())  # bug: target.view_as(pred)
            true += pred.eq(target.view_as(pred)).sum().item()
    print(
        f"epoch {epoch}: accuracy {sum(scores) / len(scores):.3f} (each row its own: {true / 400:.3f})"
    )
