"""Clean: pytorch/examples' word_language_model, shrunk to a synthetic Markov-chain corpus: a
2-layer LSTM language model (dropout, log_softmax into NLLLoss), the hidden state carried from
batch to batch and detached by repackage_hidden, clip_grad_norm_ then SGD by hand
(``p.data.add_(p.grad, alpha=-lr)`` at lr=20), the rate quartered when the validation loss stops
falling, the best model saved with torch.save and loaded back for the test."""

import math
import os
import tempfile

import torch
from torch import nn
from torch.nn import functional as F


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))  # [T, B, E]
        output, hidden = self.rnn(emb, hidden)  # [T, B, H]
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)  # [T * B, V]
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.nlayers, bsz, self.nhid),
            weight.new_zeros(self.nlayers, bsz, self.nhid),
        )


def corpus(n: int, generator: torch.Generator) -> torch.Tensor:
    """A token stream where each token mostly follows from the one before."""
    ids = [0]
    for u in torch.rand(n - 1, generator=generator).tolist():
        ids.append((ids[-1] * 7 + 3) % ntokens if u < 0.8 else int(u * 1000) % ntokens)
    return torch.tensor(ids)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()  # [T, B]


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].view(-1)
    return data, target


def evaluate(data_source):
    model.eval()
    total_loss = 0.0
    hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train():
    model.train()
    total_loss = 0.0
    hidden = model.init_hidden(batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        data, targets = get_batch(train_data, i)
        # Starting each batch, we detach the hidden state from how it was previously produced.
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
        if batch % 10 == 0 and batch > 0:
            cur_loss = total_loss / 10
            print(f"| epoch {epoch} | batch {batch} | lr {lr:.2f} | ppl {math.exp(cur_loss):.2f}")
            total_loss = 0.0


torch.manual_seed(1111)
g = torch.Generator().manual_seed(1111)
ntokens, batch_size, eval_batch_size, bptt, clip = 50, 20, 10, 20, 0.25
train_data = batchify(corpus(8000, g), batch_size)
val_data = batchify(corpus(1000, g), eval_batch_size)
test_data = batchify(corpus(1000, g), eval_batch_size)
model = RNNModel(ntokens, 32, 32, 2, dropout=0.2)
criterion = nn.NLLLoss()
save = os.path.join(tempfile.mkdtemp(), "model.pt")

lr = 20.0
best_val_loss = None
for epoch in range(1, 6):
    train()
    val_loss = evaluate(val_data)
    print(
        f"| end of epoch {epoch} | valid loss {val_loss:.2f} | valid ppl {math.exp(val_loss):.2f}"
    )
    if not best_val_loss or val_loss < best_val_loss:
        with open(save, "wb") as f:
            torch.save(model, f)
        best_val_loss = val_loss
    else:
        # Anneal the learning rate if no improvement has been seen in the validation dataset.
        lr /= 4.0

with open(save, "rb") as f:
    model = torch.load(f, weights_only=False)
    # after load the rnn params are not a continuous chunk of memory
    model.rnn.flatten_parameters()
test_loss = evaluate(test_data)
print(f"| End of training | test loss {test_loss:.2f} | test ppl {math.exp(test_loss):.2f}")
