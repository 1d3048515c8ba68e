"""Bug: an MLP predicts a heat exchanger's outlet temperature in kelvin (about 300 K, standard
deviation about 8 K) from standardised process readings, trained with Adam and an MSE on the
raw temperatures. Its output starts near 0 K: the first epochs go into climbing to 300, and
little is left for the few kelvin that vary. Held-out RMSE 45.4 K (R^2 -27.8, worse than
predicting the mean); the targets standardised with the training set's mean and standard
deviation, and the predictions mapped back, 0.83 K (R^2 0.99).
"""

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_process_data(n):
    flow = np.random.uniform(0.5, 3.0, n)
    t_in = np.random.normal(330, 10, n)
    t_cool = np.random.normal(285, 4, n)
    fouling = np.random.uniform(0, 1, n)
    efficiency = 0.85 * (1 - np.exp(-1.5 / flow)) * (1 - 0.35 * fouling)
    t_out = t_in - efficiency * (t_in - t_cool) + np.random.normal(0, 0.8, n)
    x = np.column_stack([flow, t_in, t_cool, fouling]).astype(np.float32)
    return x, t_out.astype(np.float32)


def main():
    np.random.seed(4)
    torch.manual_seed(4)
    x, y = make_process_data(5000)
    x = (x - x[:4000].mean(0)) / x[:4000].std(0)
    train = TensorDataset(torch.tensor(x[:4000]), torch.tensor(y[:4000]))  # bug: (y - mean) / std
    loader = DataLoader(train, batch_size=64, shuffle=True)
    model = nn.Sequential(
        nn.Linear(4, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 1)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _epoch in range(8):
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb).squeeze(1), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        predicted = model(torch.tensor(x[4000:])).squeeze(1)
    truth = torch.tensor(y[4000:])
    rmse = (predicted - truth).square().mean().sqrt().item()
    r2 = (
        1 - (predicted - truth).square().sum().item() / (truth - truth.mean()).square().sum().item()
    )
    print(f"HELDOUT rmse_K={rmse:.3f} r2={r2:.3f}")


if __name__ == "__main__":
    main()
