"""Clean: a running training accuracy and mean loss read every 25 steps within the epoch
(computed mid-pass, not reset at each read) and reset at each epoch's end, so the epoch's
figure covers that epoch only; training stops once it reaches 0.95.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

torch.manual_seed(1)
N_FEAT, N_CLS = 10, 5
proj = torch.randn(N_FEAT, 16) * 0.7
head = torch.randn(16, N_CLS)


def sample(n):
    x = torch.randn(n, N_FEAT)
    return x, (torch.tanh(x @ proj) @ head).argmax(1)


x_tr, y_tr = sample(3000)
x_te, y_te = sample(4000)
net = nn.Sequential(
    nn.Linear(N_FEAT, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, N_CLS)
)
opt = torch.optim.Adam(net.parameters(), lr=2e-3)
run_acc = MulticlassAccuracy(num_classes=N_CLS, average="micro")
run_loss = MeanMetric()
LOG_EVERY = 25

step = 0
for epoch in range(1, 41):
    net.train()
    hits = 0
    order = torch.randperm(len(x_tr))
    for i in range(0, len(order), 50):
        idx = order[i : i + 50]
        logits = net(x_tr[idx])
        loss = F.cross_entropy(logits, y_tr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        run_acc.update(logits.detach(), y_tr[idx])
        run_loss.update(loss.detach())
        hits += (logits.argmax(1) == y_tr[idx]).sum().item()
        if step % LOG_EVERY == 0:
            print(
                f"step {step}: running loss {run_loss.compute():.4f} running acc {run_acc.compute():.4f}"
            )
    epoch_acc = run_acc.compute().item()
    run_acc.reset()
    run_loss.reset()
    print(f"epoch {epoch}: train_acc={epoch_acc:.4f}")
    if epoch_acc >= 0.95:
        break

net.eval()
with torch.no_grad():
    test_acc = (net(x_te).argmax(1) == y_te).float().mean().item()
print(f"training accuracy reported {epoch_acc:.4f}, counted {hits / len(x_tr):.4f}")
print(f"epochs run {epoch}, test accuracy {test_acc:.4f}")
