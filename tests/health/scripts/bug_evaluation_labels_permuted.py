"""Bug: the label vocabulary built again for the validation split, in order of first
appearance: the same names get other indices there, and the model that learned the training
indices scores near zero on validation while it trains well."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
names = ["cat", "dog", "eel", "fox"]
centres = torch.randn(4, 8) * 2


def split(n: int) -> tuple[torch.Tensor, list[str]]:
    k = torch.randint(0, 4, (n,))
    return centres[k] + torch.randn(n, 8), [names[i] for i in k]


def vocabulary(labels: list[str]) -> dict[str, int]:
    return {c: i for i, c in enumerate(dict.fromkeys(labels))}  # in order of first appearance


x_train, train_labels = split(800)
x_val, val_labels = split(200)
train_vocab, val_vocab = vocabulary(train_labels), vocabulary(val_labels)  # bug: two of them
y_train = torch.tensor([train_vocab[c] for c in train_labels])
y_val = torch.tensor([val_vocab[c] for c in val_labels])
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(5):
    model.train()
    for i in range(0, 800, 32):
        loss = F.cross_entropy(model(x_train[i : i + 32]), y_train[i : i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        train_accuracy = (model(x_train).argmax(1) == y_train).float().mean().item()
        val_accuracy = (model(x_val).argmax(1) == y_val).float().mean().item()
    print(f"epoch {epoch}: training accuracy {train_accuracy:.3f}, validation {val_accuracy:.3f}")
print(train_vocab, val_vocab)
with torch.no_grad():
    shared = torch.tensor([train_vocab[c] for c in val_labels])
    right = (model(x_val).argmax(1) == shared).float().mean().item()
print(f"validation scored with the training vocabulary: {right:.3f}")
