"""Clean: cosine logits scaled before cross_entropy, two ways: a classifier over 100 classes
whose normalised features times normalised class weights are multiplied by s = 16 (NormFace),
and a contrastive loss over in-batch pairs (an NT-Xent whose diagonal is masked) at a
temperature of 0.1. A tanh in a hidden layer, before the last Linear layer, bounds no logit.
"""

import torch
from torch import nn
from torch.nn import functional as F

CLASSES, DIM = 100, 48


class CosineNet(nn.Module):
    def __init__(self, scale=16.0):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(DIM, 128), nn.Tanh(), nn.Linear(128, 64))
        self.weight = nn.Parameter(torch.randn(CLASSES, 64) * 0.1)
        self.scale = scale

    def forward(self, x):
        features = F.normalize(self.body(x), dim=1)
        return self.scale * (features @ F.normalize(self.weight, dim=1).t())


def nt_xent(z1, z2, temperature=0.1):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = len(z1)
    similarity = (z @ z.t() / temperature).masked_fill(torch.eye(2 * n, dtype=torch.bool), -1e9)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
    return F.cross_entropy(similarity, targets)


def main():
    torch.manual_seed(0)
    means = torch.randn(CLASSES, DIM) * 0.3
    y = torch.arange(CLASSES).repeat_interleave(60)
    x = means[y] + 0.5 * torch.randn(len(y), DIM)
    model = CosineNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _epoch in range(10):
        order = torch.randperm(len(x))
        for i in range(0, len(x), 128):
            batch = order[i : i + 128]
            views = x[batch] + 0.1 * torch.randn_like(x[batch])
            loss = F.cross_entropy(model(x[batch]), y[batch])
            loss = loss + nt_xent(model.body(x[batch]), model.body(views))
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    print(f"train acc={accuracy:.3f} loss={loss.item():.3f}")


if __name__ == "__main__":
    main()
