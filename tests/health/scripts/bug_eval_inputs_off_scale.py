"""Bug: a validation set built without the ``Normalize`` its training set has (the training
dataset given ``transform=train_transform``, the validation one only the conversion to [0, 1]).
The model is scored on inputs unlike any it trained on: its validation accuracy stays at 0.485
(one class) for 4 epochs while its training loss falls to 0.26; the same model scores 0.94 on
the same validation images normalised."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
MEAN, STD = torch.tensor([0.45, 0.45, 0.45]), torch.tensor([0.14, 0.14, 0.14])


def to_unit(img):  # bytes to [0, 1], as ToTensor does
    return img.float() / 255


def normalise(img):
    return (to_unit(img) - MEAN[:, None, None]) / STD[:, None, None]


class Images(Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


images = torch.randint(60, 180, (1200, 3, 16, 16), dtype=torch.uint8)
labels = (images[:, 0].float().mean((1, 2)) > images[:, 2].float().mean((1, 2))).long()
train = DataLoader(Images(images[:1000], labels[:1000], normalise), batch_size=40, shuffle=True)
val = DataLoader(Images(images[1000:], labels[1000:], to_unit), batch_size=50)  # no Normalize

model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(4):
    model.train()
    for x, y in train:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val)
    print(f"epoch {epoch}: loss {loss.item():.3f}, validation accuracy {correct / 200:.3f}")
