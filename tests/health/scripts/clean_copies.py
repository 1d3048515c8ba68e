"""Clean: a best-so-far copy (copy.deepcopy), weight averaging (AveragedModel), the whole model
pickled (torch.save) and scripted (torch.jit.script) while it is watched. Each copy works as in
plain python; one pickled under the doctor loads without treeqa (its hooks load as no-ops)."""

import copy
import functools
import io
import sys

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import AveragedModel

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(600, 10), torch.randn(600, 4).argmax(1)
best, best_model, averaged = float("inf"), None, None
for epoch in range(5):
    for i in range(0, 500, 25):
        loss = F.cross_entropy(model(x[i : i + 25]), y[i : i + 25])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        dev = F.cross_entropy(model(x[500:]), y[500:]).item()
    model.train()
    if dev < best:
        best, best_model = dev, copy.deepcopy(model)
    if epoch == 2:
        averaged = AveragedModel(model)
    elif averaged is not None:
        averaged.update_parameters(model)

model.eval()
buffer = io.BytesIO()
torch.save(model, buffer)
buffer.seek(0)
loaded = torch.load(buffer, weights_only=False).eval()
scripted = torch.jit.script(model)
with torch.no_grad():
    out = model(x[:8])
    assert torch.equal(loaded(x[:8]), out)
    assert torch.allclose(scripted(x[:8]), out)
    assert best_model is not None and averaged is not None
    best_model.eval()(x[:8])
    averaged(x[:8])
for hook in [*loaded._forward_hooks.values(), *loaded._forward_pre_hooks.values()]:
    assert isinstance(hook, functools.partial) and hook.func is sys.audit, hook
print(f"best dev loss {best:.4f}")
