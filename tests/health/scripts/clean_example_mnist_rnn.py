"""Clean: pytorch/examples' mnist_rnn, shrunk to 14x14 synthetic digits read a row at a time:
a batch-first LSTM, its last output through BatchNorm1d, Dropout2d (given a 2-D input, as the
example does), two linear layers and log_softmax into nll_loss; Adadelta at lr=0.1 with StepLR;
a test pass in eval mode under no_grad."""

import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(input_size=14, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, input):
        input = input.reshape(-1, 14, 14)  # [B, rows, columns]
        output, hidden = self.rnn(input)  # [B, 14, 64]
        output = output[:, -1, :]  # [B, 64]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        return F.log_softmax(output, dim=1)  # [B, 10]


def digits(n: int, generator: torch.Generator) -> TensorDataset:
    """Ten fixed 14x14 strokes, noised and clipped to [0, 1], normalised as MNIST is."""
    strokes = torch.rand(10, 1, 14, 14, generator=torch.Generator().manual_seed(0)) > 0.7
    y = torch.randint(0, 10, (n,), generator=generator)
    x = (strokes[y].float() + 0.3 * torch.randn(n, 1, 14, 14, generator=generator)).clamp(0, 1)
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
train_loader = DataLoader(digits(1280, g), batch_size=32, shuffle=True)
test_loader = DataLoader(digits(500, g), batch_size=250, shuffle=True)
model = Net()
optimizer = optim.Adadelta(model.parameters(), lr=0.1)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
for epoch in range(1, 4):
    train(model, train_loader, optimizer, epoch)
    test(model, test_loader)
    scheduler.step()
