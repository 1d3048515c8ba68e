"""Clean: raw sensor readings (pressure in pascals, temperature in kelvin, speed in rpm, a
vibration of 0.02 g) given to two classifiers that scale them: one standardised in the dataset
with the training set's mean and standard deviation, one that starts with a BatchNorm1d over
the raw columns. A bag of 0/1 flags and counts' logs beside them stays small.
"""

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


def simulate(rng, n):
    label = rng.integers(0, 3, n)
    pressure = rng.normal(101325, 900, n) + 400 * (label == 2)
    temp_k = rng.normal(340, 6, n) + 3 * (label == 1)
    rpm = rng.normal(1500, 120, n)
    vibration = np.abs(rng.normal(0.02, 0.006, n)) + 0.012 * (label == 1)
    events = np.log1p(rng.poisson(200, n))
    door_open = rng.integers(0, 2, n)
    x = np.stack([pressure, temp_k, rpm, vibration, events, door_open], 1)
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(label)


def train(model, x, y):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _epoch in range(6):
        order = torch.randperm(len(x))
        for i in range(0, len(x), 100):
            batch = order[i : i + 100]
            loss = F.cross_entropy(model(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return loss.item()


def main():
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    x, y = simulate(rng, 3000)
    mean, std = x.mean(0), x.std(0)
    standardised = nn.Sequential(nn.Linear(6, 64), nn.ReLU(), nn.Linear(64, 3))
    print("standardised", train(standardised, (x - mean) / std, y))
    normed = nn.Sequential(nn.BatchNorm1d(6), nn.Linear(6, 64), nn.ReLU(), nn.Linear(64, 3))
    print("batch norm first", train(normed, x, y))


if __name__ == "__main__":
    main()
