"""Clean: binary predictions read on their output's scale: a GRU ending in nn.Sigmoid,
trained with BCELoss, whose probabilities are rounded for the training and test accuracy; then
an MLP regressed on 0/1 targets with a mean squared error (its output on the targets' scale),
read at 0.5."""

import torch
import torch.nn as nn

torch.manual_seed(118)
VOCAB, SEQ = 40, 20


def make_messages(n):
    tokens = torch.randint(6, VOCAB, (n, SEQ))
    k = torch.randint(0, 4, (n,))
    for i in range(n):
        pos = torch.randperm(SEQ)[: k[i]]
        tokens[i, pos] = torch.randint(1, 6, (int(k[i]),))
    labels = (k >= 2).long()
    labels = torch.where(torch.rand(n) < 0.05, 1 - labels, labels)  # a few mislabelled messages
    return tokens, labels


class SpamGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.rnn = nn.GRU(16, 32, batch_first=True, bidirectional=True)
        self.fc = nn.Sequential(nn.Linear(64, 1), nn.Sigmoid())

    def forward(self, tokens):
        h, _ = self.rnn(self.embed(tokens))
        return self.fc(h.mean(dim=1))  # [B, 1] probabilities


def accuracy(probs, labels):
    preds = torch.round(probs.squeeze(1)).long()
    return (preds == labels).float().mean().item()


x_tr, y_tr = make_messages(3000)
x_te, y_te = make_messages(1000)
model = SpamGRU()
loss_fn = nn.BCELoss()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)

for epoch in range(6):
    model.train()
    perm = torch.randperm(len(x_tr))
    accs = []
    for i in range(0, len(perm), 100):
        idx = perm[i : i + 100]
        out = model(x_tr[idx])
        loss = loss_fn(out.squeeze(1), y_tr[idx].float())
        opt.zero_grad()
        loss.backward()
        opt.step()
        accs.append(accuracy(out.detach(), y_tr[idx]))
    print(f"epoch {epoch} loss {loss.item():.4f} train_acc {sum(accs) / len(accs):.4f}")

model.eval()
with torch.no_grad():
    out = model(x_te)
print(f"HELDOUT test_acc {accuracy(out, y_te):.4f}")
print(f"HELDOUT true_acc {((out.squeeze(1) > 0.5).long() == y_te).float().mean().item():.4f}")

# An MLP regressed on 0/1 targets, read at their midpoint.

torch.manual_seed(107)
D = 12


def make_data(n):
    x = torch.randn(n, D)
    y = ((x[:, 0] + 0.8 * x[:, 1] - 0.5 * x[:, 2] + 0.3 * torch.randn(n)) > 0.3).float()
    return x, y


x_tr, y_tr = make_data(6000)
x_te, y_te = make_data(3000)

model = nn.Sequential(nn.Linear(D, 32), nn.ReLU(), nn.Linear(32, 1))
criterion = nn.MSELoss()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

for epoch in range(8):
    running = 0.0
    order = torch.randperm(len(x_tr))
    for i in range(0, len(x_tr), 256):
        xb, yb = x_tr[order[i : i + 256]], y_tr[order[i : i + 256]]
        out = model(xb).squeeze(-1)
        loss = criterion(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running += loss.item()
    print(f"epoch {epoch} mse {running / (len(x_tr) / 256):.4f}")

model.eval()
with torch.no_grad():
    out = model(x_te).squeeze(-1)
preds = (out > 0.5).float()
test_acc = (preds == y_te).float().mean().item()
true_acc = (out.clamp(0, 1).round() == y_te).float().mean().item()
print(f"HELDOUT test_acc {test_acc:.4f}")
print(f"HELDOUT true_acc {true_acc:.4f}")
