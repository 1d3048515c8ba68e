"""Clean: per-sample gradients with torch.func (vmap over grad) set on .grad by hand, then
optimizer.step(). No backward, so no loss reaches the monitor; the losses inside vmap are
batched tensors that cannot be read on the host."""

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def sample_loss(params, x, y):
    logits = functional_call(model, params, (x.unsqueeze(0),))  # [1, 3]
    return nn.functional.cross_entropy(logits, y.unsqueeze(0))


per_sample_grads = vmap(grad(sample_loss), in_dims=(None, 0, 0))
for _step in range(100):
    x = torch.randn(16, 16)
    y = x[:, :3].argmax(1)
    params = {k: v.detach() for k, v in model.named_parameters()}
    grads = per_sample_grads(params, x, y)  # each [16, *shape]
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))  # [16]
    factor = (1.0 / norms).clamp(max=1.0)  # clip each sample's gradient to norm 1
    for name, p in model.named_parameters():
        p.grad = (grads[name] * factor.view(-1, *[1] * p.dim())).mean(0)
    opt.step()
print("done")
