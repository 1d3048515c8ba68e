"""Bug: the training and validation sets split from one dataset by two calls of random_split,
each a new permutation: most validation rows are training rows too, and the validation score
rises with the training score while the test score falls."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
features = torch.randn(1400, 20)
labels = (features[:, :2].sum(1) > 0).long()
noisy = torch.rand(1400) < 0.3
labels[noisy] = 1 - labels[noisy]  # 30% of the labels flipped: a model can overfit them
data = TensorDataset(features[:1000], labels[:1000])
test_x, test_y = features[1000:], labels[1000:]
train_set, _ = random_split(data, [800, 200])
_, val_set = random_split(data, [800, 200])  # bug: one split, train_set, val_set = ...
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
val_loader = DataLoader(val_set, batch_size=200)
model = nn.Sequential(
    nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2)
)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
best, best_state = 0.0, None
for _ in range(40):
    model.train()
    for x, y in train_loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        val = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader) / len(val_set)
    if val > best:
        best, best_state = val, {k: v.clone() for k, v in model.state_dict().items()}
model.load_state_dict(best_state)
with torch.no_grad():
    test = (model(test_x).argmax(1) == test_y).float().mean().item()
print(f"best validation accuracy {best:.2f}, its model's test accuracy {test:.2f}")
