"""Clean: losses that look like the seeded bugs' and are right: MSE of [N, 1] against [N, 1], an
L1 penalty against a scalar 0, BCE-with-logits on logits, NLL on log_softmax plus label
smoothing, NLL on sequences normalised over their last dim ([B, T, C] flattened, and [B, C, T]
over dim 1) and on the log of a softmax over dim 1, kl_div of log-probabilities against soft
targets, a hand-written squared error of [N, 1] against [N, 1] and a pairwise ranking loss
over [N, N] (both sides with gradients), F.dropout with training=self.training, and Monte
Carlo dropout (dropout layers on in eval mode) in the evaluations."""

import warnings

import torch
from torch import nn
from torch.nn import functional as F


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(20, 64)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(64, 7)  # 5 classes, 1 regression target, 1 binary logit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.dropout(F.relu(self.hidden(x)), 0.1, training=self.training)  # [B, 64]
        return self.out(self.drop(h))  # [B, 7]


warnings.filterwarnings("ignore", "Using a target size")  # torch warns on any broadcast
torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(100):
    x = torch.randn(32, 20)
    y = x[:, :5].argmax(1)
    out = model(x)  # [32, 7]
    logp = F.log_softmax(out[:, :5], dim=1)  # [32, 5]
    loss = (
        0.9 * F.nll_loss(logp, y)
        - 0.1 * logp.mean()
        + F.mse_loss(out[:, 5:6], (x[:, 0] - x[:, 1]).unsqueeze(1))
        + 1e-3 * F.l1_loss(out, torch.zeros(()))
        + F.binary_cross_entropy_with_logits(out[:, 6], (x[:, 0] > 0).float())
    )
    seq = out[:, :5].unsqueeze(1).expand(32, 3, 5)  # [B, T, C]: 3 positions per example
    loss = loss + 0.1 * (
        F.nll_loss(F.log_softmax(seq, dim=-1).reshape(-1, 5), y.repeat_interleave(3))
        + F.nll_loss(F.log_softmax(seq.transpose(1, 2), dim=1), y.unsqueeze(1).expand(32, 3))
        + F.nll_loss(torch.log(F.softmax(out[:, :5], dim=1)), y)
        + F.kl_div(logp, F.one_hot(y, 5) * 0.9 + 0.02, reduction="batchmean")  # distillation
    )
    score, target = out[:, 5:6], (x[:, 0] - x[:, 1]).unsqueeze(1)  # [N, 1] and [N, 1]
    order = torch.sign(target - target.T)  # [N, N], no gradient
    pairwise = (1 - (score - score.T) * order).relu().mean()  # both sides with gradients
    loss = loss + 0.1 * ((score - target) ** 2).mean() + 0.01 * pairwise
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 40 == 39:
        model.eval()
        model.drop.train()  # Monte Carlo dropout
        with torch.no_grad():
            probs = torch.stack([model(x)[:, :5].softmax(1) for _ in range(4)]).mean(0)
        model.train()
print("done")
