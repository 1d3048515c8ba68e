"""Bug: a three-class fault classifier for a machine, an MLP trained with Adam on its sensors'
readings in their raw units: pressure in pascals (about 101,325), temperature in kelvin, speed
in rpm, beside a vibration of about 0.02 g and a supply ripple of 0.05 V that carry most of the
signal. The first layer's outputs start in the tens of thousands and the small columns are
drowned: held-out accuracy 0.36 (chance is 0.33); standardised with the training set's mean and
standard deviation, 0.77.
"""

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


def simulate(rng, n):
    label = rng.integers(0, 3, n)
    pressure = rng.normal(101325, 900, n) + 400 * (label == 2)
    temp_k = rng.normal(340, 6, n) + 3 * (label == 1)
    rpm = rng.normal(1500, 120, n)
    vibration = np.abs(rng.normal(0.02, 0.006, n)) + 0.012 * (label == 1)
    ripple = np.abs(rng.normal(0.05, 0.012, n)) + 0.02 * (label == 2) + 0.01 * (label == 1)
    humidity = rng.uniform(20, 80, n)
    door_open = rng.integers(0, 2, n)
    x = np.stack([pressure, temp_k, rpm, vibration, ripple, humidity, door_open], 1)
    return x.astype(np.float32), label.astype(np.int64)


class SensorSet(Dataset):
    def __init__(self, x, y):
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    x_train, y_train = simulate(rng, 5000)  # bug: (x - mean) / std, the training set's
    x_val, y_val = simulate(rng, 1500)
    loader = DataLoader(SensorSet(x_train, y_train), batch_size=100, shuffle=True)
    model = nn.Sequential(
        nn.Linear(7, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _epoch in range(40):
        model.train()
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = model(torch.from_numpy(x_val)).argmax(1) == torch.from_numpy(y_val)
    print(f"HELDOUT acc={accuracy.float().mean().item():.3f}")


if __name__ == "__main__":
    main()
