"""Clean: soft overlap losses written by hand over probabilities. Dice over sigmoid
probabilities, a multi-class Dice over a softmax, IoU, V-Net's squared denominator, Tversky, a
generalised Dice with class weights, and a Dice over the output of a model that ends in a
sigmoid itself; and weighted means of fixed values by a model's positive weights (softplus,
above 1 at times), which have a Dice's form: inside a mean squared error, and an expected cost
added to the loss as it is."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
S = 16
rows, cols = torch.meshgrid(torch.arange(S).float(), torch.arange(S).float(), indexing="ij")


def batch(n):
    cx, cy = torch.rand(2, n, 1, 1) * 8 + 4
    radius = torch.rand(n, 1, 1) * 2 + 2
    mask = (((cols - cx) ** 2 + (rows - cy) ** 2) < radius**2).float()  # [n, S, S]
    image = mask * (0.5 + 0.5 * torch.rand(n, 1, 1)) + 0.3 * torch.randn(n, S, S)
    return image[:, None], mask[:, None]  # [n, 1, S, S] each


def net(out_channels, last=None):
    layers = [nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, out_channels, 1)]
    return nn.Sequential(*layers, *([last] if last is not None else []))


def dice(p, t, smooth=1.0):
    inter = (p * t).sum((1, 2, 3))
    return 1 - ((2 * inter + smooth) / (p.sum((1, 2, 3)) + t.sum((1, 2, 3)) + smooth)).mean()


def iou(p, t):
    inter = (p * t).sum()
    return 1 - inter / (p.sum() + t.sum() - inter + 1e-6)


def vnet(p, t):
    p, t = p.reshape(-1), t.reshape(-1)
    return 1 - 2 * (p * t).sum() / ((p**2).sum() + (t**2).sum() + 1e-6)


def tversky(p, t, alpha=0.3, beta=0.7):
    inter = (p * t).sum()
    return 1 - inter / (inter + alpha * (p * (1 - t)).sum() + beta * ((1 - p) * t).sum() + 1e-6)


def multi_class(logits, t):
    p = logits.softmax(1)  # [n, 2, S, S]
    one_hot = torch.cat([1 - t, t], 1)
    weights = 1 / (one_hot.sum((0, 2, 3)) ** 2 + 1)  # generalised Dice: rarer classes weigh more
    inter = (weights * (p * one_hot).sum((0, 2, 3))).sum()
    return 1 - 2 * inter / (weights * (p + one_hot).sum((0, 2, 3))).sum()


binary, two_class, own_sigmoid = net(1), net(2), net(1, nn.Sigmoid())
weighting = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1), nn.Softplus())
models = [binary, two_class, own_sigmoid, weighting]
opt = torch.optim.Adam([p for m in models for p in m.parameters()], lr=3e-3)
for step in range(120):
    images, masks = batch(16)
    logits = binary(images)
    p = torch.sigmoid(logits)
    losses = [F.binary_cross_entropy_with_logits(logits, masks), dice(p, masks), iou(p, masks)]
    losses += [vnet(p, masks), tversky(p, masks), multi_class(two_class(images), masks)]
    losses.append(dice(own_sigmoid(images), masks))
    features, values = torch.randn(16, 8, 4), torch.rand(16, 8)  # 8 neighbours' fixed values
    w = weighting(features).squeeze(-1)  # [16, 8], positive
    estimate = (w * values).sum(1) / w.sum(1)
    losses.append(F.mse_loss(estimate, values.max(1).values))
    costs = (w * (1 - values)).sum(1) / w.sum(1)  # an expected cost, in the loss as it is
    losses.append(0.1 * costs.mean())
    loss = sum(losses)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 40 == 0:
        print(f"step {step}: " + ", ".join(f"{v.item():.3f}" for v in losses))
print(f"last loss {loss.item():.3f}")
