"""Bug: the validation set made by random_split of a dataset built with the training
augmentation (a random shift and flip): the two Subsets share it, and every evaluation scores
images drawn at random."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, random_split

torch.manual_seed(0)
templates = torch.randn(4, 1, 12, 12)
templates = templates + templates.flip(3)  # each class's pattern, symmetric left to right
y = torch.randint(0, 4, (1500,))
x = templates[y] + 1.5 * torch.randn(1500, 1, 12, 12)


class Images(Dataset):
    def __init__(self, augment: bool) -> None:
        self.augment = augment

    def __len__(self) -> int:
        return len(x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = x[i]
        if self.augment:
            shift = torch.randint(-3, 4, (2,))
            image = torch.roll(image, (int(shift[0]), int(shift[1])), (1, 2))
            if torch.rand(()) < 0.5:
                image = image.flip(2)
            r, c = torch.randint(0, 8, (2,))  # and a 4 x 4 patch erased
            image = image.clone()
            image[:, r : r + 4, c : c + 4] = 0
        return image, y[i]


train, val = random_split(Images(augment=True), [1200, 300])  # bug: val is augmented too
train_loader = DataLoader(train, batch_size=32, shuffle=True)
val_loader = DataLoader(val, batch_size=100)


def evaluate() -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in val_loader:
            correct += (model(xb).argmax(1) == yb).sum().item()
    return correct / len(val)


model = nn.Sequential(nn.Flatten(), nn.Linear(144, 128), nn.ReLU(), nn.Linear(128, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(6):
    model.train()
    for xb, yb in train_loader:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch}: validation accuracy {evaluate():.3f}")
with torch.no_grad():
    idx = torch.tensor(val.indices)
    plain = (model(x[idx]).argmax(1) == y[idx]).float().mean().item()
print(f"the final model scored again: {evaluate():.3f}, {evaluate():.3f}")
print(f"the same validation images as they are: {plain:.3f}")
