"""Clean: batches from DataLoaders in ways that draw one now and then or give the model the
same tensor by design: a fixed batch drawn once from the validation loader to watch the
predictions by, a training loop over a loader with validation passes under no_grad, then the
whole training set as one batch (full-batch fine-tuning), a graph model run on every node
each step while a loader picks the nodes whose loss counts, and one-hot rows (each sums to 1)
from a loader, after a fixed batch of anchors, of the same size, each step."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 6))
with torch.no_grad():
    features = torch.randn(1200, 20)
    labels = teacher(features).argmax(1)
train_loader = DataLoader(
    TensorDataset(features[:1000], labels[:1000]), batch_size=32, shuffle=True
)
val_loader = DataLoader(TensorDataset(features[1000:], labels[1000:]), batch_size=50)
watch_x, watch_y = next(iter(val_loader))  # a fixed batch to watch the predictions by
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 6))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for _epoch in range(3):
    for x, y in train_loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
        watched = (model(watch_x).argmax(1) == watch_y).float().mean().item()
    print(f"validation accuracy {correct / 200:.2f}, watched batch {watched:.2f}")

# Full-batch fine-tuning: the whole training set every step, by design.
for _step in range(60):
    loss = F.cross_entropy(model(features[:1000]), labels[:1000])
    opt.zero_grad()
    loss.backward()
    opt.step()

# A graph model over every node each step; the loader gives the nodes whose loss counts.
adjacency = (torch.rand(1000, 1000) < 0.01).float()
adjacency = adjacency / adjacency.sum(1, keepdim=True).clamp_min(1)


class Graph(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(20, 32), nn.Linear(32, 6)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return self.second(a @ F.relu(self.first(x)) + F.relu(self.first(x)))


graph = Graph()
graph_opt = torch.optim.Adam(graph.parameters(), lr=3e-3)
nodes = DataLoader(torch.arange(1000), batch_size=100, shuffle=True)
for _epoch in range(8):
    for picked in nodes:
        logits = graph(features[:1000], adjacency)  # [1000, 6]: every node
        loss = F.cross_entropy(logits[picked], labels[picked])
        graph_opt.zero_grad()
        loss.backward()
        graph_opt.step()
with torch.no_grad():
    accuracy = (graph(features[:1000], adjacency).argmax(1) == labels[:1000]).float().mean()
print(f"graph model, training nodes {accuracy.item():.2f}")

# One-hot rows from a loader, after a fixed batch of anchors of the same size each step.
codes = torch.randint(0, 8, (1000,))
one_hot = F.one_hot(codes, 8).float()  # [1000, 8]
targets = (codes % 3 == 0).float()
coded = DataLoader(TensorDataset(one_hot, targets), batch_size=50, shuffle=True)
anchors = F.one_hot(torch.arange(50) % 8, 8).float()  # [50, 8]
scorer = nn.Linear(8, 1)
scorer_opt = torch.optim.SGD(scorer.parameters(), lr=0.5)
for _epoch in range(5):
    for x, y in coded:
        spread = scorer(anchors).var()  # [50, 1] the same anchors each step
        loss = F.binary_cross_entropy_with_logits(scorer(x)[:, 0], y) + 1e-3 * spread
        scorer_opt.zero_grad()
        loss.backward()
        scorer_opt.step()
with torch.no_grad():
    accuracy = ((scorer(one_hot)[:, 0] > 0).float() == targets).float().mean()
print(f"one-hot scorer {accuracy.item():.2f}")
