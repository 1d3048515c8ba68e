"""Clean: semi-supervised training that guesses labels for two augmentations of an unlabelled
batch with the model in train mode under no_grad (as MixMatch does), a batch-norm
recalibration each epoch (swa_utils.update_bn: train mode, no_grad, momentum None), and a
validation in eval mode."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import update_bn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 5)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
unlabelled = [torch.randn(32, 20) for _ in range(8)]
valid = [torch.randn(64, 20) for _ in range(10)]
for _epoch in range(3):
    model.train()
    for _step in range(40):
        x, u = torch.randn(32, 20), torch.randn(32, 20)
        with torch.no_grad():
            guess = model(u + 0.1 * torch.randn_like(u)) + model(u - 0.1 * torch.randn_like(u))
            guess = guess.softmax(1).argmax(1)
        loss = F.cross_entropy(model(x), x[:, :5].argmax(1)) + 0.5 * F.cross_entropy(
            model(u), guess
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    update_bn(unlabelled, model)
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x).argmax(1) == x[:, :5].argmax(1)).sum()) for x in valid)
    print(f"valid accuracy {correct / 640:.3f}")
