"""Clean: a best-so-far copy (copy.deepcopy), weight averaging (AveragedModel), the whole model
pickled (torch.save) and scripted (torch.jit.script) while it is watched. Each copy is what it is
in plain python: no hooks, a checkpoint of the same bytes as one of a model never hooked (it loads
with weights_only), and a deep copy that torch.jit.script compiles (its batch norm's forward too,
which the monitor notes once an average holds one)."""

import copy
import io

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import AveragedModel

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4)
)
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
for copied in (loaded, best_model, averaged.module):
    for m in copied.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks, m
        assert not m._forward_pre_hooks_with_kwargs, m
never_hooked = nn.Sequential(
    nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4)
)
never_hooked.load_state_dict(model.state_dict())
never_hooked.eval()
again = io.BytesIO()
torch.save(never_hooked, again)
assert buffer.getvalue() == again.getvalue(), (len(buffer.getvalue()), len(again.getvalue()))
buffer.seek(0)
allowed = [nn.Sequential, nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Dropout]
if hasattr(torch.serialization, "safe_globals"):  # torch 2.5+ (2.4's loads no whole module)
    with torch.serialization.safe_globals(allowed):
        torch.load(buffer, weights_only=True)
torch.jit.script(copy.deepcopy(model))
print(f"best dev loss {best:.4f}")
