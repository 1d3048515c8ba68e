"""Clean: recurrent states carried where they should be. A language model's stream read in
order by a DataLoader (shuffle=False), row i of each batch going on from row i of the last, its
state carried detached; long sequences from a shuffled loader cut into chunks, each chunk a step
of its own, the state carried between the chunks of the same sequences and started afresh for
each batch; an encoder's state handed to a decoder cell fed its own state; a learned initial
state; and a streaming evaluation, one series at a time, from the stream's last state."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

# 1. truncated backpropagation through time over one stream, read in order
VOCAB, ROWS, CHUNK = 16, 16, 20
stream = torch.arange(ROWS * CHUNK * 40) % VOCAB  # a periodic stream: each token predicts the next
rows = stream.view(ROWS, -1)  # [16, 800]: row i is one part of the stream
chunks = [rows[:, t : t + CHUNK + 1] for t in range(0, rows.shape[1] - CHUNK, CHUNK)]
loader = DataLoader(chunks, batch_size=None, shuffle=False)
embed, lstm, head = nn.Embedding(VOCAB, 32), nn.LSTM(32, 64, batch_first=True), nn.Linear(64, VOCAB)
params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
optimizer = torch.optim.Adam(params, 3e-3)
for _epoch in range(3):
    state = None
    for chunk in loader:
        state = None if state is None else tuple(s.detach() for s in state)
        out, state = lstm(embed(chunk[:, :-1]), state)
        lm_loss = F.cross_entropy(head(out).reshape(-1, VOCAB), chunk[:, 1:].reshape(-1))
        optimizer.zero_grad()
        lm_loss.backward()
        optimizer.step()
# streaming evaluation: one row of the stream at a time, from the state the stream ended in
with torch.no_grad():
    state = tuple(s[:, :1].contiguous() for s in state)
    for t in range(0, 60, CHUNK):
        out, state = lstm(embed(stream[t : t + CHUNK].view(1, -1)), state)

# 2. long sequences cut into chunks, a step each; 3. an encoder's state given to a decoder cell;
# 4. a learned initial state
x = torch.randn(1024, 48, 4)
y = x[:, :, 0].cumsum(1)[:, -1:]  # the sum of the first feature over the whole sequence
data = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
encoder, decoder, out_layer = nn.GRU(4, 64, batch_first=True), nn.GRUCell(1, 64), nn.Linear(64, 1)
h0 = nn.Parameter(torch.zeros(1, 1, 64))
params = [*encoder.parameters(), *decoder.parameters(), *out_layer.parameters(), h0]
optimizer = torch.optim.Adam(params, 2e-3)
for _epoch in range(3):
    for xb, yb in data:
        h = h0.expand(1, len(xb), 64).contiguous()
        for piece in xb.split(16, dim=1):  # the same sequences go on: their state is carried
            _, h = encoder(piece, h.detach())
            s, guess = h[0], torch.zeros(len(xb), 1)
            for _ in range(3):  # the decoder fed its own state
                s = decoder(guess, s)
                guess = out_layer(s)
            loss = F.mse_loss(guess, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
print(f"last training losses: the stream's {lm_loss.item():.3f}, the sums' {loss.item():.3f}")
