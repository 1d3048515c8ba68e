"""Bug: a top-1 mixture of experts returns its load-balancing loss beside its output, and the
loop prints it but leaves it out of the loss: nothing keeps the router from sending most tokens
to a few experts, and the loss it returns grows."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class MixtureOfExperts(nn.Module):
    def __init__(self, width: int = 16, experts: int = 8):
        super().__init__()
        self.gate, self.n = nn.Linear(width, experts), experts
        self.experts = nn.ModuleList(nn.Linear(width, width) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        probs = self.gate(x).softmax(-1)  # [B, E]
        weight, chosen = probs.max(-1)  # [B], [B]
        outs = torch.stack([expert(x) for expert in self.experts], 1)  # [B, E, D]
        out = outs[torch.arange(len(x)), chosen] * weight[:, None]  # [B, D]
        share = F.one_hot(chosen, self.n).float().mean(0)  # [E]: tokens sent to each
        balance = self.n * (share * probs.mean(0)).sum()  # Switch Transformer's auxiliary loss
        return out, balance, chosen


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.moe, self.out = nn.Linear(10, 16), MixtureOfExperts(), nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = F.relu(self.inp(x))
        mixed, balance, chosen = self.moe(h)
        return self.out(h + mixed), balance, chosen


x = torch.randn(2000, 10)
y = torch.where(x[:, :1] > 0, torch.sin(3 * x[:, 1:2]), x[:, 2:3] ** 2)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(200):
    batch = torch.randint(0, 2000, (32,))
    pred, aux_loss, chosen = model(x[batch])
    loss = F.mse_loss(pred, y[batch])  # bug: + 0.01 * aux_loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f} aux {aux_loss.item():.3f}")
print("tokens per expert", torch.bincount(model(x)[2], minlength=8).tolist())
