"""Bug: a transformer encoder built with the default batch_first=False and fed
[batch, time, d]: self-attention runs across the examples of the batch at each position, not
over a sequence's own tokens, so the model cannot see whether the first token comes again, and
each prediction depends on which examples share its batch. Held-out accuracy 0.50, and 2.9% of
the predictions change when the held-out set is scored in another order and batch size; built
with batch_first=True, 0.999 and none.
"""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

VOCAB, SEQ = 16, 16


def make_data(n, g):
    # position 0 holds a query token; label = does the query occur again later in the sequence
    q = torch.randint(0, VOCAB, (n,), generator=g)
    rest = torch.randint(0, VOCAB - 1, (n, SEQ - 1), generator=g)
    rest = rest + (rest >= q[:, None]).long()  # rest never equals the query
    y = torch.randint(0, 2, (n,), generator=g)
    k = torch.randint(1, SEQ, (n,), generator=g)
    hit = y.bool()
    rest[hit, k[hit] - 1] = q[hit]
    x = torch.cat([q[:, None], rest], 1)
    return x, y


class QueryMatcher(nn.Module):
    def __init__(self, d_model=64, nhead=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Parameter(torch.randn(1, SEQ, d_model) * 0.1)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=128, dropout=0.1)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, 2)

    def forward(self, x):  # x: [batch, time]
        h = self.tok(x) + self.pos  # [batch, time, d]
        h = self.encoder(h)
        return self.head(h.mean(dim=1))


g = torch.Generator().manual_seed(1)
x_tr, y_tr = make_data(4000, g)
x_te, y_te = make_data(1000, g)
print("positive rate", y_tr.float().mean().item())

train_loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=64, shuffle=True)
test_loader = DataLoader(TensorDataset(x_te, y_te), batch_size=64, shuffle=False)

model = QueryMatcher()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(12):
    model.train()
    total = 0.0
    for xb, yb in train_loader:
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        total += loss.item() * len(xb)
    print(f"epoch {epoch} train_loss {total / len(x_tr):.4f}")


@torch.no_grad()
def predict(loader):
    model.eval()
    return torch.cat([model(xb).argmax(1) for xb, _ in loader])


preds = predict(test_loader)
acc = (preds == y_te).float().mean().item()
perm = torch.randperm(len(x_te), generator=torch.Generator().manual_seed(7))
shuffled = DataLoader(TensorDataset(x_te[perm], y_te[perm]), batch_size=50, shuffle=False)
preds2 = torch.empty_like(preds)
preds2[perm] = predict(shuffled)
changed = (preds != preds2).float().mean().item()
print(
    f"held-out accuracy {acc:.4f}; predictions changed by another order and batch size: {changed:.1%}"
)
