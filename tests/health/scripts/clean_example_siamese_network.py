"""Clean: pytorch/examples' siamese_network, shrunk: a narrow ResNet-18-shaped feature
extractor (torchvision's resnet18 with its first convolution taking one channel and its fc
dropped) applied to both images, the two feature vectors concatenated into a small MLP and a
sigmoid, BCELoss against same-class (1) / different-class (0) targets; Adadelta at lr=1.0 with
StepLR; pairs drawn at random by the dataset, even indices same-class. The dataset holds the
8-bit images as MNIST's ``.data`` gives them and hands out ``.clone().float()`` of them, whole
numbers in [0, 255], as the example does: the first convolution's batch norm takes the scale
out."""

import random

import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


def resnet18_children(width=8):
    """resnet18's children, two BasicBlocks a stage, at 1/8 of its width."""
    w = [width, 2 * width, 4 * width, 8 * width]
    return [
        nn.Conv2d(3, w[0], kernel_size=7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(w[0]),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        nn.Sequential(BasicBlock(w[0], w[0]), BasicBlock(w[0], w[0])),
        nn.Sequential(BasicBlock(w[0], w[1], 2), BasicBlock(w[1], w[1])),
        nn.Sequential(BasicBlock(w[1], w[2], 2), BasicBlock(w[2], w[2])),
        nn.Sequential(BasicBlock(w[2], w[3], 2), BasicBlock(w[3], w[3])),
        nn.AdaptiveAvgPool2d((1, 1)),
        nn.Linear(w[3], 1000),
    ]


class SiameseNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        children = resnet18_children()
        # over-write the first conv layer to be able to read gray-scale images
        children[0] = nn.Conv2d(1, 8, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)
        self.fc_in_features = children[-1].in_features
        # remove the last layer of resnet18 (linear layer which is after avgpool layer)
        self.resnet = nn.Sequential(*children[:-1])
        self.fc = nn.Sequential(
            nn.Linear(self.fc_in_features * 2, 256),
            nn.ReLU(inplace=True),
            nn.Linear(256, 1),
        )
        self.sigmoid = nn.Sigmoid()
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        return output.view(output.size()[0], -1)  # [B, 64]

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        output = torch.cat((output1, output2), 1)  # [B, 128]
        output = self.fc(output)
        return self.sigmoid(output)  # [B, 1]


class APP_MATCHER(Dataset):
    """Pairs of 16x16 synthetic 8-bit digits: even indices same class, odd ones not."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        strokes = (
            torch.rand(10, 1, 16, 16, generator=torch.Generator().manual_seed(0)) > 0.7
        ).float()
        self.targets = torch.randint(0, 10, (n,), generator=g)
        noise = 0.3 * torch.rand(n, 1, 16, 16, generator=g)
        images = F.avg_pool2d(strokes[self.targets], 3, 1, 1) * 0.7 + noise
        self.data = (images * 255).round().to(torch.uint8)  # as MNIST(...).data holds them
        self.grouped_examples = {i: torch.where(self.targets == i)[0] for i in range(10)}

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, index):
        selected_class = random.randint(0, 9)
        group = self.grouped_examples[selected_class]
        image_1 = self.data[group[random.randint(0, len(group) - 1)]].clone().float()
        if index % 2 == 0:
            image_2 = self.data[group[random.randint(0, len(group) - 1)]].clone().float()
            target = torch.tensor(1, dtype=torch.float)
        else:
            other_selected_class = random.randint(0, 9)
            while other_selected_class == selected_class:
                other_selected_class = random.randint(0, 9)
            other = self.grouped_examples[other_selected_class]
            image_2 = self.data[other[random.randint(0, len(other) - 1)]].clone().float()
            target = torch.tensor(0, dtype=torch.float)
        return image_1, image_2, target


def train(model, train_loader, optimizer, epoch):
    model.train()
    criterion = nn.BCELoss()
    for batch_idx, (images_1, images_2, targets) in enumerate(train_loader):
        optimizer.zero_grad()
        outputs = model(images_1, images_2).squeeze()
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        if batch_idx % 10 == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(images_1)}]\tLoss: {loss.item():.6f}")


def test(model, test_loader):
    model.eval()
    test_loss, correct = 0.0, 0
    criterion = nn.BCELoss()
    with torch.no_grad():
        for images_1, images_2, targets in test_loader:
            outputs = model(images_1, images_2).squeeze()
            test_loss += criterion(outputs, targets).sum().item()
            pred = torch.where(outputs > 0.5, 1, 0)
            correct += pred.eq(targets.view_as(pred)).sum().item()
    print(f"Test set: Average loss: {test_loss / len(test_loader.dataset):.4f}, {correct} right")


random.seed(1)
torch.manual_seed(1)
train_loader = DataLoader(APP_MATCHER(960, seed=1), batch_size=32)
test_loader = DataLoader(APP_MATCHER(200, seed=2), batch_size=100)
model = SiameseNetwork()
optimizer = optim.Adadelta(model.parameters(), lr=1.0)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
for epoch in range(1, 4):
    train(model, train_loader, optimizer, epoch)
    test(model, test_loader)
    scheduler.step()
