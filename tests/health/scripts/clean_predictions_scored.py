"""Clean: predictions scored right beside the shapes that read like the slips: a single logit
predicted by its sign and compared as [N] with [N], a multi-class [N, 1] argmax compared with
target.view_as(pred), a two-logit argmax, a sequence model's [B, 1, V] output decoded over
its last dim, a contrastive mask labels.view(-1, 1) == labels, a one-hot y[:, None] ==
arange(C), a retrieval match of [N, 1] queries against [M] gallery labels, and a CBAM-style
max over a one-channel map inside the forward."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.one = nn.Linear(32, 1)  # a binary head: one logit
        self.four = nn.Linear(32, 4)  # a four-class head
        self.gate = nn.Conv1d(1, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        spatial, _ = torch.max(h.unsqueeze(1), dim=1, keepdim=True)  # [N, 1, 32]: one channel
        h = h * torch.sigmoid(self.gate(spatial)).squeeze(1)
        return self.one(h), self.four(h)


x = torch.randn(1200, 8)
binary = (x[:, 0] > 0).float()
classes = (x[:, 1] > 0).long() * 2 + (x[:, 2] > 0).long()
model = Net()
decoder = nn.Linear(8, 5)  # a "language model" decoding one position: [B, 1, V]
opt = torch.optim.Adam([*model.parameters(), *decoder.parameters()], lr=1e-2)
for step in range(100):
    i = (step * 40) % 1000
    xb, yb, cb = x[i : i + 40], binary[i : i + 40], classes[i : i + 40]
    one, four = model(xb)
    mask = (cb.view(-1, 1) == cb).float()  # a contrastive mask of the batch's own labels
    positives = (mask.sum(1) - 1).mean()
    token = decoder(xb).unsqueeze(1)  # [B, 1, V]
    loss = (
        F.binary_cross_entropy_with_logits(one.squeeze(1), yb)
        + F.cross_entropy(four, cb)
        + F.cross_entropy(token.squeeze(1), cb)
        + 0 * positives
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    train_acc = ((one.squeeze(1) > 0).float() == yb).float().mean()
model.eval()
with torch.no_grad():
    one, four = model(x[1000:])
    by_sign = ((one > 0).float().view(-1) == binary[1000:]).float().mean().item()
    pred = four.argmax(dim=1, keepdim=True)
    by_view = pred.eq(classes[1000:].view_as(pred)).float().mean().item()
    two = torch.stack([-one.squeeze(1), one.squeeze(1)], dim=1)  # two logits: argmax is fine
    by_argmax = (two.argmax(1).float() == binary[1000:]).float().mean().item()
    token = decoder(x[1000:]).unsqueeze(1)
    decoded = token.argmax(-1).squeeze(1)  # over the vocabulary, not the size-1 position dim
    by_token = (decoded == classes[1000:]).float().mean().item()
    onehot = (classes[1000:][:, None] == torch.arange(4)).float()  # [200, 4]
    gallery = classes[:150]  # [M] with M != N
    matches = (classes[1000:].view(-1, 1) == gallery).float().mean().item()
    same = (classes[1000:].view(-1, 1) == classes[1000:]).float().sum(1).mean().item()
print(f"accuracy: binary {by_sign:.3f}, four-class {by_view:.3f}, two logits {by_argmax:.3f}")
print(f"token {by_token:.3f}, one-hot rows {onehot.sum(1).mean():.1f}, matches {matches:.3f}")
print(f"rows sharing a label {same:.1f}")
