"""Bug: a dataset kept as a list of Python dicts, read by two forked DataLoader workers. Each
record a worker reads has its reference counts written, so the pages holding them become the
worker's own: within an epoch each worker holds a private copy of most of the records (here
~100 MB each, read from /proc/<pid>/smaps_rollup), three copies of the data where one would
do. Kept as NumPy arrays, the workers copy nothing of them."""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, n: int):
        g = torch.Generator().manual_seed(0)
        features = torch.randn(n, 4, generator=g).tolist()
        # bug: one dict per record; np.array(features, np.float32) and np.array(labels) instead
        self.records = [
            {"id": i, "features": f, "label": int(f[0] + f[1] > 0)} for i, f in enumerate(features)
        ]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        record = self.records[i]
        return torch.tensor(record["features"]), record["label"]


if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(Records(300_000), batch_size=256, shuffle=True, num_workers=2)
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    it = iter(loader)
    for step, (x, y) in enumerate(it):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 600:
            break
    private = []
    for worker in it._workers:
        with open(f"/proc/{worker.pid}/smaps_rollup") as rollup:
            fields = dict(line.split()[:2] for line in rollup if line.endswith("kB\n"))
        private.append((int(fields["Private_Clean:"]) + int(fields["Private_Dirty:"])) / 1024)
    print("workers' private memory (MB):", " ".join(f"{mb:.0f}" for mb in private))
