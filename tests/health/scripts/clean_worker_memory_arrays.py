"""Clean: datasets that forked DataLoader workers read without copying them: 300,000 records
kept as NumPy arrays (two objects, however many rows), a list of 5,000 dicts (too small to
matter), and a list of 300,000 dicts read by the main process alone (num_workers=0)."""

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Arrays(Dataset):
    def __init__(self, n: int):
        rng = np.random.default_rng(0)
        self.features = rng.standard_normal((n, 4)).astype(np.float32)
        self.labels = (self.features[:, 0] + self.features[:, 1] > 0).astype(np.int64)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return torch.from_numpy(self.features[i]), int(self.labels[i])


class Records(Dataset):
    def __init__(self, n: int):
        features = Arrays(n).features.tolist()
        self.records = [{"features": f, "label": int(f[0] + f[1] > 0)} for f in features]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        record = self.records[i]
        return torch.tensor(record["features"]), record["label"]


def train(loader: DataLoader, steps: int) -> float:
    model = nn.Sequential(
        nn.Linear(4, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 2)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == steps:
            break
    return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    losses = [
        train(DataLoader(Arrays(300_000), batch_size=256, shuffle=True, num_workers=2), 150),
        train(DataLoader(Records(5_000), batch_size=256, shuffle=True, num_workers=2), 60),
        train(DataLoader(Records(300_000), batch_size=256, shuffle=True), 100),
    ]
    print("last losses:", " ".join(f"{loss:.3f}" for loss in losses))
