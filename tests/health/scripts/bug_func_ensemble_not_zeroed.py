"""Bug: PyTorch's model-ensembling recipe (``stack_module_state``, the stacked weights as
``nn.Parameter``s, ``vmap`` over ``functional_call`` of a base copy on the meta device) trained
with Adam, its ``zero_grad()`` left out: every step adds its gradients to all before. The
doctor watched the recipe only to its first step until its frozen-model check left the base's
forward alone inside ``vmap`` (its weights there have no storage to read)."""

import copy

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn import functional as F

torch.manual_seed(0)
x_all = torch.randn(4096, 16)
y_all = (x_all @ torch.randn(16, 5)).argmax(1)
M = 4  # models in the ensemble
models = [nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 5)) for _ in range(M)]
params, buffers = stack_module_state(models)
params = {k: nn.Parameter(v) for k, v in params.items()}
base = copy.deepcopy(models[0]).to("meta")


def ensemble(p, b, x):
    return functional_call(base, (p, b), (x,))


opt = torch.optim.Adam(params.values(), lr=3e-3)
for _step in range(120):
    i = torch.randint(0, 4096, (64,))
    logits = vmap(ensemble, in_dims=(0, 0, None))(params, buffers, x_all[i])  # [M, B, C]
    loss = F.cross_entropy(logits.reshape(-1, 5), y_all[i].repeat(M))
    loss.backward()  # bug: opt.zero_grad() before it
    opt.step()
print("done")
