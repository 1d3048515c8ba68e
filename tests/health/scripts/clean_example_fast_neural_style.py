"""Clean: pytorch/examples' fast_neural_style training, shrunk to 32x32 synthetic images: a
transformer net (reflection-padded convolutions, InstanceNorm2d, residual blocks, nearest
upsampling) fed pixels in [0, 255] as the example's ``x.mul(255)`` transform gives them; a frozen
VGG-shaped loss network (``requires_grad = False``, never put in eval mode, random weights here)
whose relu2_2 features give the content loss and whose Gram matrices give the style loss, at
content weight 1e5 and style weight 1e10; ``normalize_batch`` divides the batch by 255 in place;
Adam at 1e-3; the loader unshuffled, as the example's is."""

from collections import namedtuple

import torch
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        return self.conv2d(out)


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        return out + residual


class UpsampleConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = torch.nn.functional.interpolate(x_in, mode="nearest", scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        return self.conv2d(out)


class TransformerNet(torch.nn.Module):
    """The example's net at a quarter of its width, with two residual blocks, not five."""

    def __init__(self):
        super().__init__()
        self.conv1 = ConvLayer(3, 8, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(8, affine=True)
        self.conv2 = ConvLayer(8, 16, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(16, affine=True)
        self.conv3 = ConvLayer(16, 32, kernel_size=3, stride=2)
        self.in3 = torch.nn.InstanceNorm2d(32, affine=True)
        self.res1 = ResidualBlock(32)
        self.res2 = ResidualBlock(32)
        self.deconv1 = UpsampleConvLayer(32, 16, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(16, affine=True)
        self.deconv2 = UpsampleConvLayer(16, 8, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(8, affine=True)
        self.deconv3 = ConvLayer(8, 3, kernel_size=9, stride=1)
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))  # [B, 8, 32, 32]
        y = self.relu(self.in2(self.conv2(y)))  # [B, 16, 16, 16]
        y = self.relu(self.in3(self.conv3(y)))  # [B, 32, 8, 8]
        y = self.res1(y)
        y = self.res2(y)
        y = self.relu(self.in4(self.deconv1(y)))  # [B, 16, 16, 16]
        y = self.relu(self.in5(self.deconv2(y)))  # [B, 8, 32, 32]
        return self.deconv3(y)  # [B, 3, 32, 32]


def vgg16_features():
    """vgg16.features up to relu4_3 at 1/8 of its width (random weights: no download here)."""
    layers, in_channels = [], 3
    for v in [8, 8, "M", 16, 16, "M", 32, 32, 32, "M", 64, 64, 64]:
        if v == "M":
            layers.append(torch.nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers += [
                torch.nn.Conv2d(in_channels, v, kernel_size=3, padding=1),
                torch.nn.ReLU(inplace=True),
            ]
            in_channels = v
    return layers


class Vgg16(torch.nn.Module):
    def __init__(self, requires_grad=False):
        super().__init__()
        vgg_pretrained_features = vgg16_features()
        self.slice1 = torch.nn.Sequential()
        self.slice2 = torch.nn.Sequential()
        self.slice3 = torch.nn.Sequential()
        self.slice4 = torch.nn.Sequential()
        for x in range(4):
            self.slice1.add_module(str(x), vgg_pretrained_features[x])
        for x in range(4, 9):
            self.slice2.add_module(str(x), vgg_pretrained_features[x])
        for x in range(9, 16):
            self.slice3.add_module(str(x), vgg_pretrained_features[x])
        for x in range(16, 23):
            self.slice4.add_module(str(x), vgg_pretrained_features[x])
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        h = self.slice1(X)
        h_relu1_2 = h
        h = self.slice2(h)
        h_relu2_2 = h
        h = self.slice3(h)
        h_relu3_3 = h
        h = self.slice4(h)
        h_relu4_3 = h
        vgg_outputs = namedtuple("VggOutputs", ["relu1_2", "relu2_2", "relu3_3", "relu4_3"])
        return vgg_outputs(h_relu1_2, h_relu2_2, h_relu3_3, h_relu4_3)


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    return features.bmm(features_t) / (ch * h * w)  # [B, ch, ch]


def normalize_batch(batch):
    # normalize using imagenet mean and std
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


def photos(n: int, generator: torch.Generator) -> torch.Tensor:
    """Smooth 32x32 colour images decoded as 8-bit, then ``ToTensor`` and ``x.mul(255)``:
    whole numbers in [0, 255]."""
    coarse = torch.rand(n, 3, 4, 4, generator=generator)
    x = torch.nn.functional.interpolate(coarse, size=32, mode="bilinear", align_corners=False)
    x = x + 0.05 * torch.rand(n, 3, 32, 32, generator=generator)
    decoded = (x.clamp(0, 1) * 255).round().to(torch.uint8)
    return decoded.float().div(255).mul(255)


torch.manual_seed(42)
g = torch.Generator().manual_seed(42)
batch_size, content_weight, style_weight = 4, 1e5, 1e10
train_dataset = TensorDataset(photos(320, g), torch.zeros(320, dtype=torch.long))  # one folder
train_loader = DataLoader(train_dataset, batch_size=batch_size)

transformer = TransformerNet()
optimizer = Adam(transformer.parameters(), 1e-3)
mse_loss = torch.nn.MSELoss()

vgg = Vgg16(requires_grad=False)
style = photos(1, torch.Generator().manual_seed(7))
style = style.repeat(batch_size, 1, 1, 1)

features_style = vgg(normalize_batch(style))
gram_style = [gram_matrix(y) for y in features_style]

for e in range(1):
    transformer.train()
    agg_content_loss = 0.0
    agg_style_loss = 0.0
    count = 0
    for batch_id, (x, _) in enumerate(train_loader):
        n_batch = len(x)
        count += n_batch
        optimizer.zero_grad()

        y = transformer(x)

        y = normalize_batch(y)
        x = normalize_batch(x)

        features_y = vgg(y)
        features_x = vgg(x)

        content_loss = content_weight * mse_loss(features_y.relu2_2, features_x.relu2_2)

        style_loss = 0.0
        for ft_y, gm_s in zip(features_y, gram_style, strict=True):
            gm_y = gram_matrix(ft_y)
            style_loss += mse_loss(gm_y, gm_s[:n_batch, :, :])
        style_loss *= style_weight

        total_loss = content_loss + style_loss
        total_loss.backward()
        optimizer.step()

        agg_content_loss += content_loss.item()
        agg_style_loss += style_loss.item()

        if (batch_id + 1) % 20 == 0:
            print(
                f"Epoch {e + 1}:\t[{count}/{len(train_dataset)}]\tcontent: {agg_content_loss / (batch_id + 1):.6f}"
                f"\tstyle: {agg_style_loss / (batch_id + 1):.6f}"
                f"\ttotal: {(agg_content_loss + agg_style_loss) / (batch_id + 1):.6f}"
            )
