"""Bug: a language model trained on padded batches with CrossEntropyLoss() and no
ignore_index: about half of the targets are the padding id, so the model learns to predict
padding after padding, the loss's mean counts those positions and the perplexity it reports
is not the text's."""

import torch
from torch import nn

PAD, V = 0, 60

torch.manual_seed(0)
sentences = [torch.randint(1, V, (int(n),)) for n in torch.randint(4, 16, (640,))]


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, 32, padding_idx=PAD)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.out = nn.Linear(64, V)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(tokens))[0])  # [B, T, V]


model = LM()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
criterion = nn.CrossEntropyLoss()  # ignore_index=PAD forgotten
for epoch in range(2):
    for i in range(0, len(sentences), 16):
        batch = nn.utils.rnn.pad_sequence(sentences[i : i + 16], batch_first=True)  # [B, T]
        logits = model(batch[:, :-1])
        loss = criterion(logits.reshape(-1, V), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 3))
