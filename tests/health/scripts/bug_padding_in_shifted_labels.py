"""Bug: a causal language model whose loss shifts its labels as the transformers causal-LM loss
does (padded on the right with one ignore_index a row, then shifted left), given
``labels=input_ids`` with the padding left in them: about 40% of the targets are the padding
id. The one ignore_index a row made the targets read as masked already, and the padding in the
loss was missed."""

import torch
from torch import nn
from torch.nn import functional as F

PAD, V = 0, 60

torch.manual_seed(0)
sentences = [torch.randint(1, V, (int(n),)) for n in torch.randint(4, 16, (640,))]


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, 32, padding_idx=PAD)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.out = nn.Linear(64, V)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.out(self.rnn(self.embed(tokens))[0])  # [B, T, V]
        shifted = F.pad(labels, (0, 1), value=-100)[:, 1:]  # the next token, -100 at the end
        return F.cross_entropy(logits.reshape(-1, V), shifted.reshape(-1), ignore_index=-100)


model = LM()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
for epoch in range(2):
    for i in range(0, len(sentences), 16):
        batch = nn.utils.rnn.pad_sequence(sentences[i : i + 16], batch_first=True)  # [B, T]
        loss = model(batch, labels=batch)  # bug: the padding's labels not set to -100
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
