"""Clean: pytorch/examples' regression, twice: a Linear(4, 1) fitting a random quartic with
smooth_l1_loss and SGD written by hand, until the loss falls under 1e-3. First as the example
reads (``fc.zero_grad()``, ``param.data.add_(-0.1 * param.grad)``), then in older PyTorch's
words (``param.grad.data``), each gradient zeroed by hand after the update
(``fc.weight.grad.data.zero_()``)."""

from itertools import count

import torch
from torch.nn import functional as F

POLY_DEGREE = 4
torch.manual_seed(0)
W_target = torch.randn(POLY_DEGREE, 1) * 5
b_target = torch.randn(1) * 5


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x**i for i in range(1, POLY_DEGREE + 1)], 1)  # [B, 4]


def f(x):
    """Approximated function."""
    return x.mm(W_target) + b_target.item()


def get_batch(batch_size=32):
    """Builds a batch i.e. (x, f(x)) pair."""
    random = torch.randn(batch_size)
    x = make_features(random)
    y = f(x)
    return x, y


fc = torch.nn.Linear(W_target.size(0), 1)
for batch_idx in count(1):  # noqa: B007 (the count is printed after the loop)
    batch_x, batch_y = get_batch()
    fc.zero_grad()
    output = F.smooth_l1_loss(fc(batch_x), batch_y)
    loss = output.item()
    output.backward()
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)
    if loss < 1e-3:
        break
print(f"Loss: {loss:.6f} after {batch_idx} batches")

fc = torch.nn.Linear(W_target.size(0), 1)
for batch_idx in count(1):  # noqa: B007 (the count is printed after the loop)
    batch_x, batch_y = get_batch()
    output = F.smooth_l1_loss(fc(batch_x), batch_y)
    loss = output.item()
    output.backward()
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad.data)
    # Reset gradients
    fc.weight.grad.data.zero_()
    fc.bias.grad.data.zero_()
    if loss < 1e-3:
        break
print(f"Loss: {loss:.6f} after {batch_idx} batches")
