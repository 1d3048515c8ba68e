"""Bug: a pretrained model's weights are loaded, then the model is initialised again
(model.apply(init_weights) after load_state_dict, the two in the wrong order), so fine-tuning
starts from new weights: nothing of the pretraining is left."""

import os
import tempfile

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
direction = torch.randn(20, 1)


def data(n):
    x = torch.randn(n, 20)
    return x, ((x @ direction).squeeze(1) + 0.5 * x[:, 0] * x[:, 1]).gt(0).long()


def make_model():
    return nn.Sequential(
        nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2)
    )


def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


# Pretraining on plenty of data, saved as a checkpoint.
pretrained = make_model()
opt = torch.optim.Adam(pretrained.parameters(), lr=1e-2)
x, y = data(4000)
for _ in range(300):
    i = torch.randint(0, 4000, (128,))
    loss = F.cross_entropy(pretrained(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
path = os.path.join(tempfile.mkdtemp(), "pretrained.pt")
torch.save(pretrained.state_dict(), path)

# Fine-tuning on 32 labelled examples.
model = make_model()
model.load_state_dict(torch.load(path))
model.apply(init_weights)  # bug: initialise first, then load
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
x_few, y_few = data(32)
for _ in range(100):
    loss = F.cross_entropy(model(x_few), y_few)
    opt.zero_grad()
    loss.backward()
    opt.step()
x_test, y_test = data(2000)
with torch.no_grad():
    print(f"held-out accuracy {(model(x_test).argmax(1) == y_test).float().mean():.2f}")
