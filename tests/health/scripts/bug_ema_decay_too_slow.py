"""Bug: an exponential moving average of the weights kept by hand with decay 0.9999 over a run
of 470 steps: the average is still 95% the weights it was copied with before training, and it
is the model evaluated (held-out accuracy 0.29, the trained model 1.00; a decay warmed up as
min(d, (1 + n) / (10 + n)) scores 1.00)."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

# synthetic 6-class problem: each class is a mixture of 3 gaussian blobs in 32-d
N_CLASSES, DIM, BLOBS = 6, 32, 3
centers = torch.randn(N_CLASSES * BLOBS, DIM) * 1.5


def make_split(n):
    idx = torch.randint(0, N_CLASSES * BLOBS, (n,))
    x = centers[idx] + torch.randn(n, DIM)
    return x, idx // BLOBS


x_train, y_train = make_split(6000)
x_test, y_test = make_split(2000)

model = nn.Sequential(
    nn.Linear(DIM, 128),
    nn.ReLU(),
    nn.Linear(128, 128),
    nn.ReLU(),
    nn.Linear(128, N_CLASSES),
)
ema = copy.deepcopy(model)
for p in ema.parameters():
    p.requires_grad_(False)
ema_decay = 0.9999

opt = torch.optim.Adam(model.parameters(), lr=1e-3)
batch_size, epochs = 64, 5
step = 0
for epoch in range(epochs):
    perm = torch.randperm(len(x_train))
    model.train()
    total = 0.0
    for i in range(0, len(x_train), batch_size):
        b = perm[i : i + batch_size]
        loss = F.cross_entropy(model(x_train[b]), y_train[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters(), strict=True):
                e.mul_(ema_decay).add_(p, alpha=1 - ema_decay)
        total += loss.item() * len(b)
    print(f"epoch {epoch} step {step} train_loss {total / len(x_train):.4f}")


@torch.no_grad()
def accuracy(net, x, y):
    net.eval()
    return (net(x).argmax(1) == y).float().mean().item()


print(f"HELDOUT ema_acc {accuracy(ema, x_test, y_test):.4f}")
print(f"HELDOUT model_acc {accuracy(model, x_test, y_test):.4f}")
