"""Bug: a table whose last column is the label, standardised and fed whole to the classifier
(``table`` where ``table[:, :-1]`` was meant). The model reads the label off its input: the
training loss falls to 0.000 and the validation accuracy, on rows built the same way, is 1.00,
a score it cannot reach on new rows, whose label is not known (its column at its mean, 0):
0.84 there, as the fixed script's model (the label left out) scores on both."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
ROWS, FEATURES = 3000, 10
x = torch.randn(ROWS, FEATURES)
label = ((x[:, 0] - x[:, 1] + 0.5 * x[:, 2] + 0.7 * torch.randn(ROWS)) > 0).long()
table = torch.cat([x, label[:, None].float()], 1)  # the file as read: label last
table = (table - table.mean(0)) / table.std(0)
features = table  # bug: table[:, :-1]
train, val = slice(0, 2500), slice(2500, ROWS)

model = nn.Sequential(nn.Linear(features.shape[1], 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for _step in range(200):
    rows = torch.randint(0, 2500, (64,))
    loss = F.cross_entropy(model(features[train][rows]), label[train][rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    val_accuracy = (model(features[val]).argmax(1) == label[val]).float().mean()
    honest = features[val].clone()
    if honest.shape[1] > FEATURES:
        honest[:, FEATURES:] = 0  # a new row's label is not known
    honest_accuracy = (model(honest).argmax(1) == label[val]).float().mean()
print(f"last loss {loss.item():.3f}, validation {val_accuracy:.2f}, new rows {honest_accuracy:.2f}")
