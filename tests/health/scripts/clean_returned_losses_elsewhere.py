"""Clean: a load-balancing loss a model returns, used other than by adding it to the loss: by a
second optimiser (the router's) whose backward runs after the first one's step, over the graph
the first kept for it with retain_graph=True; through torch.autograd.grad, its gradients added
by hand; and in the list given to torch.autograd.backward. Each run's term under its own key."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2000, 10)
y = torch.where(x[:, :1] > 0, torch.sin(3 * x[:, 1:2]), x[:, 2:3] ** 2)


class Net(nn.Module):
    def __init__(self, key: str, experts: int = 4):
        super().__init__()
        self.key = key
        self.inp, self.gate, self.out = nn.Linear(10, 16), nn.Linear(16, experts), nn.Linear(16, 1)
        self.experts = nn.ModuleList(nn.Linear(16, 16) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = F.relu(self.inp(x))  # [B, 16]
        probs = self.gate(h).softmax(-1)  # [B, E]
        weight, chosen = probs.max(-1)
        outs = torch.stack([expert(h) for expert in self.experts], 1)  # [B, E, 16]
        mixed = outs[torch.arange(len(x)), chosen] * weight[:, None]
        share = F.one_hot(chosen, len(self.experts)).float().mean(0)
        aux = len(self.experts) * (share * probs.mean(0)).sum()
        return {"pred": self.out(h + mixed), f"aux_loss_{self.key}": aux}


def train(how: str) -> None:
    model = Net(how)
    router = list(model.gate.parameters())
    rest = [p for name, p in model.named_parameters() if not name.startswith("gate")]
    opt = torch.optim.Adam(rest if how == "second optimiser" else model.parameters(), lr=3e-3)
    opt_router = torch.optim.SGD(router, lr=0.05)
    for _step in range(80):
        batch = torch.randint(0, 2000, (32,))
        out = model(x[batch])
        loss, aux = F.mse_loss(out["pred"], y[batch]), out[f"aux_loss_{how}"]
        opt.zero_grad()
        if how == "second optimiser":
            loss.backward(retain_graph=True)
            opt.step()
            opt_router.zero_grad()
            (0.01 * aux).backward()
            opt_router.step()
            continue
        if how == "autograd.grad":
            loss.backward(retain_graph=True)
            params = [p for p in model.parameters() if p.grad is not None]
            for p, g in zip(
                params, torch.autograd.grad(0.01 * aux, params, allow_unused=True), strict=True
            ):
                if g is not None:
                    p.grad += g
        else:
            torch.autograd.backward([loss, 0.01 * aux])
        opt.step()
    print(f"{how}: loss {loss.item():.3f}")


for how in ("second optimiser", "autograd.grad", "backward list"):
    train(how)
