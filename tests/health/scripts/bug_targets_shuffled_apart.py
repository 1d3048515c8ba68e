"""Bug: images and their labels in two datasets, each with its own shuffling DataLoader,
zipped: each loader draws its own order, so the labels of a batch belong to other images.
Held out 0.26 after 5 epochs (the loss stays at the constant's level), where one loader over
both (``TensorDataset(images, labels)``) gives 1.00."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)


class Images(Dataset):
    def __init__(self, images):
        self.images = images

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i]


def data(n):
    y = torch.randint(0, 4, (n,))
    x = torch.randn(n, 1, 12, 12) * 0.5
    for i in range(n):  # a bright quarter: which one says the class
        r, c = divmod(int(y[i]), 2)
        x[i, 0, r * 6 : r * 6 + 6, c * 6 : c * 6 + 6] += 1.0
    return x, y


x_train, y_train = data(2000)
x_test, y_test = data(500)
images = DataLoader(Images(x_train), batch_size=32, shuffle=True)
labels = DataLoader(y_train, batch_size=32, shuffle=True)  # bug: its own order; one loader
model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(288, 4)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _epoch in range(5):
    for x, y in zip(images, labels, strict=True):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
with torch.no_grad():
    accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
print(f"held-out accuracy {accuracy:.2f}")
