"""Bug: a small CNN on synthetic digits whose classifier is built inside forward(), as
nn.Linear(x.size(1), 10)(x), to skip working out the flattened size. Each call makes a new
layer with new random weights, which the optimiser (built from model.parameters() before) never
holds: the convolutions learn against a head that changes at every step. Held-out accuracy
0.10 over ten classes; the head built once in __init__ (self.fc = nn.Linear(32 * 5 * 5, 10)),
0.92.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_digits(n, prototypes, generator):
    y = torch.randint(0, 10, (n,), generator=generator)
    shifts = torch.randint(-2, 3, (n, 2), generator=generator).tolist()
    x = torch.stack(
        [
            torch.roll(prototypes[c], shifts=(a, b), dims=(1, 2))
            for c, (a, b) in zip(y, shifts, strict=True)
        ]
    )
    return x + 0.4 * torch.randn(x.shape, generator=generator), y


class DigitNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return nn.Linear(x.size(1), 10)(x)  # bug: self.fc(x), self.fc made in __init__


def main():
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    pixels = (torch.rand(10, 1, 20, 20, generator=generator) < 0.2).float()
    prototypes = F.avg_pool2d(pixels, 3, 1, 1) * 2
    x_train, y_train = make_digits(2000, prototypes, generator)
    x_test, y_test = make_digits(1000, prototypes, generator)
    model = DigitNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _epoch in range(3):
        model.train()
        order = torch.randperm(len(x_train))
        for i in range(0, len(order), 64):
            rows = order[i : i + 64]
            loss = F.cross_entropy(model(x_train[rows]), y_train[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"HELDOUT acc={accuracy:.4f}")


if __name__ == "__main__":
    main()
