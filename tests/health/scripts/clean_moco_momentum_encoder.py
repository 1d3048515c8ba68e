"""Clean: MoCo v2 as its official code writes it. The key encoder is a deep copy of the query
encoder inside the trained ``MoCo`` module, frozen (``requires_grad = False``), and updated by
momentum after every step through ``param_k.data = param_k.data * m + param_q.data * (1 - m)``;
it runs under ``no_grad`` in train mode, its batch norm moving its running statistics on
purpose. Its weights move every step by a new tensor assigned to ``.data``, which no version
counter shows: frozen-in-train-mode flagged its batch norm before moved weights were told by
their values too."""

import copy

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
D_IN, D_OUT, K, B, T = 32, 32, 1024, 64, 0.1
# synthetic "images": 20 latent prototypes, two noisy views per sample
protos = torch.randn(20, D_IN)


def augment(x):
    return x * (1 + 0.2 * torch.randn_like(x)) + 0.3 * torch.randn_like(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(D_IN, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, D_OUT)
        )

    def forward(self, x):
        return F.normalize(self.net(x), dim=1)


class MoCo(nn.Module):
    def __init__(self, m=0.99):
        super().__init__()
        self.encoder_q = Encoder()
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for p in self.encoder_k.parameters():
            p.requires_grad = False
        self.m = m
        self.register_buffer("queue", F.normalize(torch.randn(D_OUT, K), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for pq, pk in zip(self.encoder_q.parameters(), self.encoder_k.parameters(), strict=True):
            pk.data = pk.data * self.m + pq.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        ptr = int(self.queue_ptr)
        self.queue[:, ptr : ptr + keys.shape[0]] = keys.T
        self.queue_ptr[0] = (ptr + keys.shape[0]) % K

    def forward(self, im_q, im_k):
        q = self.encoder_q(im_q)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = self.encoder_k(im_k)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], dim=1) / T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return logits, labels


model = MoCo()
opt = torch.optim.SGD(model.encoder_q.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
for step in range(1, 161):
    ids = torch.randint(0, 20, (B,))
    x = protos[ids]
    logits, labels = model(augment(x), augment(x))
    loss = F.cross_entropy(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        acc = (logits.argmax(1) == 0).float().mean().item()
        print(f"step {step} loss {loss.item():.4f} pos-top1 {acc:.3f}")
