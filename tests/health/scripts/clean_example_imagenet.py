"""Clean: pytorch/examples' imagenet main.py on tiny synthetic data: a torchvision-shaped ResNet
(one BasicBlock a stage, 1/8 of resnet18's width, its Kaiming init) on 16x16 images of 10
classes normalised with ImageNet's mean and std; CrossEntropyLoss, SGD at 0.1 with momentum 0.9
and weight decay 1e-4, StepLR(30, 0.1) each epoch; top-1/top-5 accuracy under no_grad and
AverageMeters of ``loss.item()`` in the training loop, which zeroes the gradients after the
forward; validate() in eval mode under no_grad; a checkpoint of model, optimiser and scheduler
saved each epoch and copied when best."""

import os
import shutil
import tempfile
import time

import torch
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


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


class ResNet(nn.Module):
    def __init__(self, num_classes=10, width=8):
        super().__init__()
        w = [width, 2 * width, 4 * width, 8 * width]
        self.conv1 = nn.Conv2d(3, w[0], kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(w[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = BasicBlock(w[0], w[0])
        self.layer2 = BasicBlock(w[0], w[1], 2)
        self.layer3 = BasicBlock(w[1], w[2], 2)
        self.layer4 = BasicBlock(w[2], w[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(w[3], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))  # [B, 8, 4, 4]
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # [B, 64, 1, 1]
        x = torch.flatten(self.avgpool(x), 1)  # [B, 64]
        return self.fc(x)  # [B, 10]


class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self, name):
        self.name = name
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def train(train_loader, model, criterion, optimizer, epoch):
    batch_time, data_time = AverageMeter("Time"), AverageMeter("Data")
    losses, top1, top5 = AverageMeter("Loss"), AverageMeter("Acc@1"), AverageMeter("Acc@5")
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(train_loader):
        data_time.update(time.time() - end)
        output = model(images)
        loss = criterion(output, target)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0], images.size(0))
        top5.update(acc5[0], images.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        batch_time.update(time.time() - end)
        end = time.time()
        if i % 10 == 0:
            print(f"Epoch: [{epoch}][{i}] Loss {losses.avg:.4e} Acc@1 {top1.avg.item():6.2f}")


def validate(val_loader, model, criterion):
    losses, top1, top5 = AverageMeter("Loss"), AverageMeter("Acc@1"), AverageMeter("Acc@5")
    model.eval()
    with torch.no_grad():
        for images, target in val_loader:
            output = model(images)
            loss = criterion(output, target)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            losses.update(loss.item(), images.size(0))
            top1.update(acc1[0], images.size(0))
            top5.update(acc5[0], images.size(0))
    print(f" * Acc@1 {top1.avg.item():.3f} Acc@5 {top5.avg.item():.3f}")
    return top1.avg


def save_checkpoint(state, is_best, folder):
    filename = os.path.join(folder, "checkpoint.pth.tar")
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, os.path.join(folder, "model_best.pth.tar"))


def images(n: int, generator: torch.Generator) -> TensorDataset:
    """Ten smooth colour patterns, noised, in [0, 1], then normalised as ImageNet is."""
    patterns = torch.rand(10, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    patterns = nn.functional.interpolate(patterns, size=16, mode="bilinear", align_corners=False)
    y = torch.randint(0, 10, (n,), generator=generator)
    x = (patterns[y] + 0.2 * torch.randn(n, 3, 16, 16, generator=generator)).clamp(0, 1)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    return TensorDataset((x - mean) / std, y)


torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
train_loader = DataLoader(images(960, g), batch_size=32, shuffle=True)
val_loader = DataLoader(images(256, g), batch_size=64, shuffle=False)
model = ResNet()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
scheduler = StepLR(optimizer, step_size=30, gamma=0.1)
folder = tempfile.mkdtemp()
best_acc1 = 0
for epoch in range(3):
    train(train_loader, model, criterion, optimizer, epoch)
    acc1 = validate(val_loader, model, criterion)
    scheduler.step()
    is_best = acc1 > best_acc1
    best_acc1 = max(acc1, best_acc1)
    save_checkpoint(
        {
            "epoch": epoch + 1,
            "arch": "resnet",
            "state_dict": model.state_dict(),
            "best_acc1": best_acc1,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        },
        is_best,
        folder,
    )
