"""Bug: a cosine-similarity classifier (NormFace's form) over 100 classes: normalised features
times normalised class weights, given to cross_entropy as they are. Cosines lie in [-1, 1], so
the softmax gives the right class at most 1 / (1 + 99 e^-2), 0.07, and the loss cannot fall
below 2.6. Held-out accuracy 0.58; the cosines times a scale of 16, 0.76.
"""

import torch
from torch import nn
from torch.nn import functional as F

CLASSES, DIM = 100, 48


class CosineNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, 64))
        self.weight = nn.Parameter(torch.randn(CLASSES, 64) * 0.1)

    def forward(self, x):
        features = F.normalize(self.body(x), dim=1)
        return features @ F.normalize(self.weight, dim=1).t()  # bug: 16 * (...)


def draw(means, per_class):
    y = torch.arange(CLASSES).repeat_interleave(per_class)
    return means[y] + 0.5 * torch.randn(len(y), DIM), y


def main():
    torch.manual_seed(0)
    means = torch.randn(CLASSES, DIM) * 0.3
    (x, y), (x_test, y_test) = draw(means, 60), draw(means, 40)
    model = CosineNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _epoch in range(30):
        model.train()
        order = torch.randperm(len(x))
        for i in range(0, len(x), 128):
            batch = order[i : i + 128]
            loss = F.cross_entropy(model(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"HELDOUT acc={accuracy:.3f} train_loss={loss.item():.3f}")


if __name__ == "__main__":
    main()
