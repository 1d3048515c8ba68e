"""Clean: a curriculum stream that yields its easy third twice and its hard rest once an epoch,
in batches split between 2 DataLoader workers by get_worker_info(): each batch is given by one
worker (an easy example twice, by one worker or by both, as the split falls), 5,333 examples
an epoch as meant."""

import itertools
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

N_TRAIN, N_TEST, D, C = 4000, 1000, 16, 3
EPOCHS, NUM_WORKERS, BS, EASY_REPEATS = 3, 2, 64, 2


class CurriculumStream(IterableDataset):
    def __init__(self, x, y, margin):
        self.x, self.y = x, y
        order = margin.argsort(descending=True).tolist()
        self.easy, self.hard = order[: len(order) // 3], order[len(order) // 3 :]

    def __iter__(self):
        schedule = torch.tensor(self.easy * EASY_REPEATS + self.hard)  # easy examples twice
        batches = schedule.split(BS)
        info = get_worker_info()
        if info is not None:
            batches = itertools.islice(batches, info.id, None, info.num_workers)
        for i in batches:
            yield self.x[i], self.y[i], i


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(27)
    w = torch.randn(D, C, generator=g)
    x = torch.randn(N_TRAIN + N_TEST, D, generator=g)
    logits = x @ w
    y = logits.argmax(1)
    top2 = logits.topk(2, dim=1).values
    margin = (top2[:, 0] - top2[:, 1])[:N_TRAIN]
    ds = CurriculumStream(x[:N_TRAIN], y[:N_TRAIN], margin)
    expected = EASY_REPEATS * len(ds.easy) + len(ds.hard)
    loader = DataLoader(ds, batch_size=None, num_workers=NUM_WORKERS)
    model = nn.Sequential(
        nn.Linear(D, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, C)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
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
        print(
            f"epoch {epoch} examples {seen} (expected {expected}) distinct {len(ids)} loss {loss.item():.4f}"
        )
    with torch.no_grad():
        acc = (model(x[N_TRAIN:]).argmax(1) == y[N_TRAIN:]).float().mean().item()
    print(f"HELDOUT examples_per_epoch {seen}")
    print(f"HELDOUT expected_per_epoch {expected}")
    print(f"HELDOUT distinct_per_epoch {len(ids)}")
    print(f"HELDOUT epoch_seconds {sum(times) / len(times):.3f}")
    print(f"HELDOUT test_acc {acc:.4f}")


if __name__ == "__main__":
    main()
