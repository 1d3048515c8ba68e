"""Clean: evaluations whose inputs are prepared as the training inputs are, or differ on
purpose: images normalised by one function for both splits; sparse dark images (MNIST's mean
is 0.13) with noise of sigma 0.5 added for training only, validated clean (the noise centres
them on 0 but leaves their mean); a denoiser sampled under no_grad from noise at sigma 20 down
to an image; a curve fitted on [-1, 1] and drawn over [-3, 3]. One optimiser steps all four;
each is evaluated every 20 steps."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
MEAN, STD = 0.45, 0.14
images = torch.rand(1200, 1, 12, 12) * 0.5 + 0.2
labels = (images[:, 0, :6].mean((1, 2)) > images[:, 0, 6:].mean((1, 2))).long()
dark = images * (images > 0.6)  # sparse strokes, as MNIST's: mean 0.13, in [0, 1]
xs = torch.linspace(-1, 1, 256)[:, None]


def normalise(x):
    return (x - MEAN) / STD


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 144, 2)
    )


classifier, noisy, denoiser = (
    cnn(),
    cnn(),
    nn.Sequential(nn.Linear(145, 64), nn.SiLU(), nn.Linear(64, 144)),
)
curve = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
models = [classifier, noisy, denoiser, curve]
optimizer = torch.optim.Adam([p for m in models for p in m.parameters()], lr=3e-3)


def denoise(x, sigma):  # x [B, 144], sigma [B, 1]
    return denoiser(torch.cat([x, sigma.log()], 1))


for step in range(120):
    i = torch.randint(0, 1000, (32,))
    sigma = torch.exp(torch.randn(32, 1))
    clean = images[i].flatten(1)
    losses = [
        F.cross_entropy(classifier(normalise(images[i])), labels[i]),
        F.cross_entropy(noisy(dark[i] + 0.5 * torch.randn(32, 1, 12, 12)), labels[i]),
        F.mse_loss(denoise(clean + sigma * torch.randn_like(clean), sigma), clean),
        F.mse_loss(curve(xs), torch.sin(3 * xs)),
    ]
    optimizer.zero_grad()
    sum(losses).backward()
    optimizer.step()
    if step % 20 == 19:
        for m in models:
            m.eval()
        with torch.no_grad():
            right = [
                (classifier(normalise(images[j : j + 50])).argmax(1) == labels[j : j + 50]).sum()
                for j in (1000, 1050)
            ]
            clean_right = [
                (noisy(dark[j : j + 50]).argmax(1) == labels[j : j + 50]).sum()
                for j in (1000, 1050)
            ]
            x = 20 * torch.randn(8, 144)
            for s in torch.logspace(1.3, -1, 12):  # sigma 20 -> 0.1
                x = denoise(x, s.expand(8, 1))
            drawn = curve(torch.linspace(-3, 3, 100)[:, None])
        for m in models:
            m.train()
        print(
            step, [round(float(loss), 3) for loss in losses], int(sum(right)), int(sum(clean_right))
        )
