"""Clean: one encoder with batch norms run on two augmented views of each image in one
forward (the views alike, so its running statistics fit both), the random views for
training only and a fixed validation set drawn shuffled, and one label vocabulary, the
training split's, sorted, for both splits."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
names = ["ash", "elm", "fir", "oak"]
templates = torch.randn(4, 64)
picks = torch.randint(0, 4, (1400,))
x = templates[picks] + 0.8 * torch.randn(1400, 64)
labels = [names[i] for i in picks]
vocabulary = {c: i for i, c in enumerate(sorted(set(labels[:1200])))}  # one, for both splits
y = torch.tensor([vocabulary[c] for c in labels])


class Leaves(Dataset):
    def __init__(self, rows: range, augment: bool) -> None:
        self.rows, self.augment = rows, augment

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = x[self.rows[i]]
        if self.augment:  # two random views, for training only
            return torch.stack([row + 0.3 * torch.randn(64), row + 0.3 * torch.randn(64)]), y[
                self.rows[i]
            ]
        return torch.stack([row, row]), y[self.rows[i]]


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 2048), nn.BatchNorm1d(2048), nn.ReLU())
        self.head = nn.Linear(4096, 4)

    def forward(self, views: torch.Tensor) -> torch.Tensor:
        a, b = self.encoder(views[:, 0]), self.encoder(views[:, 1])  # one encoder, two views
        return self.head(torch.cat([a, b], 1))


train = DataLoader(Leaves(range(1200), augment=True), batch_size=64, shuffle=True)
val = DataLoader(Leaves(range(1200, 1400), augment=False), batch_size=50, shuffle=True)
model = Pair()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(5):
    model.train()
    for views, target in train:
        loss = F.cross_entropy(model(views), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    right = 0
    with torch.no_grad():
        for views, target in val:
            right += (model(views).argmax(1) == target).sum().item()
    print(f"epoch {epoch}: validation accuracy {right / 200:.3f}")
