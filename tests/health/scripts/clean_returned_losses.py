"""Clean: models that return loss terms beside their output, each used: a load-balancing loss
added to the loss, one added only after a warm-up, a model's own loss (with its perplexity,
derived from it, for the log) trained with its auxiliary term, and a script's own loss in
place of the model's."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
x = torch.randn(2000, 10)
y = torch.where(x[:, :1] > 0, torch.sin(3 * x[:, 1:2]), x[:, 2:3] ** 2)


class Net(nn.Module):
    def __init__(self, experts: int = 4):
        super().__init__()
        self.inp, self.gate, self.out = nn.Linear(10, 16), nn.Linear(16, experts), nn.Linear(16, 1)
        self.experts = nn.ModuleList(nn.Linear(16, 16) for _ in range(experts))

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        h = F.relu(self.inp(x))  # [B, 16]
        probs = self.gate(h).softmax(-1)  # [B, E]
        weight, chosen = probs.max(-1)
        outs = torch.stack([expert(h) for expert in self.experts], 1)  # [B, E, 16]
        mixed = outs[torch.arange(len(x)), chosen] * weight[:, None]
        share = F.one_hot(chosen, len(self.experts)).float().mean(0)
        result = {
            "pred": self.out(h + mixed),
            "aux_loss": len(self.experts) * (share * probs.mean(0)).sum(),
        }
        if y is not None:
            result["loss"] = F.mse_loss(result["pred"], y)
            result["perplexity"] = result["loss"].exp()  # for the log
        return result


def train(how: str) -> None:
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(80):
        batch = torch.randint(0, 2000, (32,))
        if how == "own":  # the model's loss, and its term
            out = model(x[batch], y[batch])
            loss = out["loss"] + 0.01 * out["aux_loss"]
        elif how == "script's":  # the script's loss in place of the model's
            out = model(x[batch], y[batch])
            loss = F.smooth_l1_loss(out["pred"], y[batch]) + 0.01 * out["aux_loss"]
        else:
            out = model(x[batch])
            loss = F.mse_loss(out["pred"], y[batch])
            if how == "always" or step >= 60:
                loss = loss + 0.01 * out["aux_loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"{how}: loss {loss.item():.3f}")


for how in ("after warm-up", "script's", "own", "always"):
    train(how)
