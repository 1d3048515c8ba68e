"""Bug: the validation loader built with the training loader's keyword arguments, drop_last
among them: a test set of 300 sorted by class loses its last 44 examples, all of the last
class, the hardest, and the accuracy reported leaves them out."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
y = torch.arange(3).repeat_interleave(1000)
spread = torch.tensor([0.5, 0.5, 2.0])[y, None]  # the last class the noisiest
x = torch.randn(3000, 8) * spread + torch.randn(3, 8)[y]
order = torch.randperm(3000)
train, test = order[:2700], order[2700:].sort().values  # the test set sorted by class
kwargs = {"batch_size": 128, "drop_last": True}
train_loader = DataLoader(TensorDataset(x[train], y[train]), shuffle=True, **kwargs)
test_loader = DataLoader(TensorDataset(x[test], y[test]), **kwargs)  # bug: drop_last too
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(3):
    model.train()
    for xb, yb in train_loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    correct = scored = 0
    with torch.no_grad():
        for xb, yb in test_loader:
            correct += (model(xb).argmax(1) == yb).sum().item()
            scored += len(yb)
    print(f"epoch {epoch}: test accuracy {correct / scored:.3f} over {scored} of {len(test)}")
with torch.no_grad():
    every = (model(x[test]).argmax(1) == y[test]).float().mean().item()
print(f"over every test example: {every:.3f}")
