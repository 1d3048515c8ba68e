"""Clean: padded batches with the padding left out of the loss: a language model whose
cross_entropy has ignore_index=PAD, one whose class weight for PAD is 0, one whose per-token
losses are masked by hand, one whose padding id is also its end-of-text token (padded
positions masked with -100, the end of each sentence a real target of that id), and a tagger
whose tag set (id 0 is the tag "O", most of the targets) is not the words' vocabulary,
although the words' Embedding pads with id 0."""

import torch
from torch import nn
from torch.nn import functional as F

PAD, V, TAGS = 0, 60, 5

torch.manual_seed(0)
sentences = [torch.randint(1, V, (int(n),)) for n in torch.randint(4, 16, (640,))]


class Net(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, 32, padding_idx=PAD)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.out = nn.Linear(64, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(tokens))[0])  # [B, T, classes]


lm, weighted, masked, eos, tagger = Net(V), Net(V), Net(V), Net(V), Net(TAGS)
models = (lm, weighted, masked, eos, tagger)
opt = torch.optim.Adam([p for m in models for p in m.parameters()], lr=2e-3)
no_pad = torch.ones(V)
no_pad[PAD] = 0
for epoch in range(2):
    for i in range(0, len(sentences), 16):
        batch = nn.utils.rnn.pad_sequence(sentences[i : i + 16], batch_first=True)  # [B, T]
        logits = lm(batch[:, :-1])
        targets = batch[:, 1:].reshape(-1)
        loss = F.cross_entropy(logits.reshape(-1, V), targets, ignore_index=PAD)
        loss = loss + F.cross_entropy(weighted(batch[:, :-1]).reshape(-1, V), targets, no_pad)
        per_token = F.cross_entropy(masked(batch[:, :-1]).reshape(-1, V), targets, reduction="none")
        real = (targets != PAD).float()
        loss = loss + (per_token * real).sum() / real.sum()
        ended = [torch.cat([s, torch.tensor([PAD])]) for s in sentences[i : i + 16]]  # + EOS
        texts = nn.utils.rnn.pad_sequence(ended, batch_first=True, padding_value=-100)
        inputs, labels = texts[:, :-1].clamp(min=PAD), texts[:, 1:]
        loss = loss + F.cross_entropy(eos(inputs).reshape(-1, V), labels.reshape(-1))
        tags = torch.where(batch % 7 == 0, batch % TAGS, 0)  # mostly "O"
        loss = loss + F.cross_entropy(tagger(batch).transpose(1, 2), tags)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
