"""Clean: pytorch/examples' dcgan, shrunk to 16x16 synthetic images in [-1, 1]: a transposed-
convolution generator and a convolutional discriminator with batch norm, DCGAN's N(0, 0.02)
init, BCELoss on the discriminator's sigmoid, two Adam optimisers (lr 2e-4, beta1 0.5); D
trained on real then on ``fake.detach()``, G through D on the same fakes; every 10th batch the
fixed noise's images made as the example makes them, in train mode with gradients on."""

import torch
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

nz, ngf, ndf, nc = 16, 8, 8, 1


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),  # [B, 32, 4, 4]
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),  # [B, 16, 8, 8]
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),  # [B, 1, 16, 16]
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),  # [B, 8, 8, 8]
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),  # [B, 16, 4, 4]
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),  # [B, 1, 1, 1]
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)  # [B]


torch.manual_seed(999)
g = torch.Generator().manual_seed(999)
blobs = torch.rand(4, 1, 16, 16, generator=g) * 2 - 1
real_images = (
    blobs[torch.randint(0, 4, (1024,), generator=g)]
    + 0.1 * torch.randn(1024, 1, 16, 16, generator=g)
).clamp(-1, 1)
dataloader = DataLoader(TensorDataset(real_images), batch_size=32, shuffle=True)

netG = Generator()
netG.apply(weights_init)
netD = Discriminator()
netD.apply(weights_init)
criterion = nn.BCELoss()
fixed_noise = torch.randn(32, nz, 1, 1)
real_label, fake_label = 1, 0
optimizerD = optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))

for epoch in range(3):
    for i, (real_cpu,) in enumerate(dataloader):
        ############################
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ###########################
        # train with real
        netD.zero_grad()
        batch_size = real_cpu.size(0)
        label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype)
        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()

        # train with fake
        noise = torch.randn(batch_size, nz, 1, 1)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

        ############################
        # (2) Update G network: maximize log(D(G(z)))
        ###########################
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optimizerG.step()

        print(
            f"[{epoch}/3][{i}/{len(dataloader)}] Loss_D: {errD.item():.4f} "
            f"Loss_G: {errG.item():.4f} D(x): {D_x:.4f} D(G(z)): {D_G_z1:.4f} / {D_G_z2:.4f}"
        )
        if i % 10 == 0:  # the example saves both as image grids every 100 batches
            fake = netG(fixed_noise)
            grid = torch.cat([real_cpu[:8], fake.detach()[:8]])  # [16, 1, 16, 16]
