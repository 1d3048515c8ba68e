"""Bug: an in-memory dataset streamed through an IterableDataset and read by a DataLoader with
num_workers=2, its __iter__ not split by worker (no get_worker_info()): each worker yields all
4,000 rows, so an epoch gives 8,000 examples, 4,000 of them distinct, each batch twice in a
row (islice(rows, info.id, None, info.num_workers) gives 4,000)."""

import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset

N_TRAIN, N_TEST, D, C = 4000, 1000, 20, 4
EPOCHS, NUM_WORKERS, BS = 3, 2, 64


def make_data(seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(D, C, generator=g)
    x = torch.randn(N_TRAIN + N_TEST, D, generator=g)
    y = (x @ w + 0.5 * torch.randn(N_TRAIN + N_TEST, C, generator=g)).argmax(1)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


class TensorStream(IterableDataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        idx = range(len(self.x))
        for i in idx:
            yield self.x[i], self.y[i], i


def main():
    torch.manual_seed(0)
    xtr, ytr, xte, yte = make_data(0)
    loader = DataLoader(TensorStream(xtr, ytr), batch_size=BS, num_workers=NUM_WORKERS)
    model = nn.Sequential(nn.Linear(D, 64), nn.ReLU(), nn.Linear(64, C))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    times = []
    for epoch in range(EPOCHS):
        t0 = time.time()
        seen, ids = 0, set()
        for xb, yb, ib in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(yb)
            ids.update(ib.tolist())
        times.append(time.time() - t0)
        print(f"epoch {epoch} examples {seen} distinct {len(ids)} loss {loss.item():.4f}")
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    print(f"HELDOUT examples_per_epoch {seen}")
    print(f"HELDOUT distinct_per_epoch {len(ids)}")
    print(f"HELDOUT epoch_seconds {sum(times) / len(times):.3f}")
    print(f"HELDOUT test_acc {acc:.4f}")


if __name__ == "__main__":
    main()
