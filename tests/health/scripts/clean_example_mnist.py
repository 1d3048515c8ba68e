"""Clean: pytorch/examples' mnist, shrunk to 12x12 synthetic digits: two convolutions, max
pooling, dropout and log_softmax into nll_loss; Adadelta at lr=1.0 with StepLR (gamma 0.7) each
epoch; a test pass in eval mode under no_grad that sums the batch losses. The training loader
is unshuffled, as the example's is on a CPU."""

import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(256, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))  # [B, 8, 10, 10]
        x = F.relu(self.conv2(x))  # [B, 16, 8, 8]
        x = F.max_pool2d(x, 2)  # [B, 16, 4, 4]
        x = self.dropout1(x)
        x = torch.flatten(x, 1)  # [B, 256]
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)  # [B, 10]


def digits(n: int, generator: torch.Generator) -> TensorDataset:
    """Ten fixed 12x12 strokes, noised and clipped to [0, 1], normalised as MNIST is."""
    strokes = torch.rand(10, 1, 12, 12, generator=torch.Generator().manual_seed(0)) > 0.7
    y = torch.randint(0, 10, (n,), generator=generator)
    x = (strokes[y].float() + 0.3 * torch.randn(n, 1, 12, 12, generator=generator)).clamp(0, 1)
    return TensorDataset((x - 0.1307) / 0.3081, y)


def train(model, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % 20 == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}]\tLoss: {loss.item():.6f}")


def test(model, test_loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    print(f"Test set: Average loss: {test_loss / len(test_loader.dataset):.4f}, {correct} right")


torch.manual_seed(1)
g = torch.Generator().manual_seed(1)
train_loader = DataLoader(digits(1280, g), batch_size=32)  # shuffled only on an accelerator
test_loader = DataLoader(digits(500, g), batch_size=250)
model = Net()
optimizer = optim.Adadelta(model.parameters(), lr=1.0)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
for epoch in range(1, 4):
    train(model, train_loader, optimizer, epoch)
    test(model, test_loader)
    scheduler.step()
