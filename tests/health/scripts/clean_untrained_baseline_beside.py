"""Clean: an untrained copy of the model kept before training and scored once at the end beside
the trained model, on the same test set, to show what training gained."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(27)


def blobs_images(n):
    # class = which quadrant holds a bright gaussian blob (4 classes), plus pixel noise
    y = torch.randint(0, 4, (n,))
    rr, cc = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    cy = 4 + 8 * (y // 2).float() + torch.randn(n)
    cx = 4 + 8 * (y % 2).float() + torch.randn(n)
    blob = torch.exp(-((rr - cy[:, None, None]) ** 2 + (cc - cx[:, None, None]) ** 2) / 4.0)
    return (blob + 0.7 * torch.randn(n, 16, 16)).unsqueeze(1), y


train_dl = DataLoader(TensorDataset(*blobs_images(3000)), batch_size=32, shuffle=True)
test_x, test_y = blobs_images(1000)

model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(16 * 4 * 4, 4),
)
# keep the untrained network to report how much training improves over it
baseline = copy.deepcopy(model)

opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
for epoch in range(3):
    model.train()
    for xb, yb in train_dl:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")


def accuracy(net):
    net.eval()
    with torch.no_grad():
        return (net(test_x).argmax(1) == test_y).float().mean().item()


base_acc, model_acc = accuracy(baseline), accuracy(model)
print(f"improvement over untrained: {100 * (model_acc - base_acc):.1f} points")
print(f"HELDOUT baseline_acc {base_acc:.4f}")
print(f"HELDOUT model_acc {model_acc:.4f}")
