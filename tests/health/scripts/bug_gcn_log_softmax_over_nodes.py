"""Bug: pytorch/examples' gcn (as ``clean_example_gcn.py``: a synthetic Cora-shaped graph,
two GraphConv layers, NLLLoss over the training nodes picked by index) with its log_softmax over
dim 0, the 300 nodes, instead of dim 1, the 7 topics: each topic's scores are normalised against
the other papers. The loss reads the rows of the training nodes only (``output[idx_train]``), so
the normalisation is found behind that selection."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import Adam


class GraphConv(nn.Module):
    """Graph convolution, Kipf and Welling (2017): A_hat X W."""

    def __init__(self, input_dim, output_dim, use_bias=False):
        super().__init__()
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)  # [N, out]
        output = torch.spmm(adj_mat, support)  # [N, out]
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super().__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.gc2(x, adj_mat)
        return F.log_softmax(x, dim=0)  # [N, C]  bug: dim=1, the topics


def cora_like(n: int, topics: int, words: int, generator: torch.Generator):
    """Papers citing mostly within their topic; each paper's words drawn mostly from its topic's."""
    labels = torch.randint(0, topics, (n,), generator=generator)
    topic_words = torch.rand(topics, words, generator=generator) < 0.1
    noise = torch.rand(n, words, generator=generator) < 0.02
    keep = torch.rand(n, words, generator=generator) < 0.5
    features = ((topic_words[labels] & keep) | noise).float()
    features = features / features.sum(1, keepdim=True).clamp(min=1)
    src = torch.randint(0, n, (4 * n,), generator=generator)
    same = labels.unsqueeze(0) == labels.unsqueeze(1)  # [N, N]
    dst = torch.multinomial(same[src].float() * 9 + 1, 1, generator=generator).squeeze(1)
    adj = torch.zeros(n, n)
    adj[src, dst] = 1.0
    adj = ((adj + adj.t() + torch.eye(n)) > 0).float()
    d = adj.sum(1).rsqrt()
    adj_mat = (d.unsqueeze(1) * adj * d.unsqueeze(0)).to_sparse()
    return features, labels, adj_mat


def train_iter(
    epoch, model, optimizer, criterion, input, target, mask_train, mask_val, print_every=10
):
    model.train()
    optimizer.zero_grad()
    output = model(*input)
    loss = criterion(output[mask_train], target[mask_train])
    loss.backward()
    optimizer.step()

    loss_train, acc_train = test(model, criterion, input, target, mask_train)
    loss_val, acc_val = test(model, criterion, input, target, mask_val)
    if epoch % print_every == 0:
        print(
            f"Epoch {epoch:04d} | loss train {loss_train:.4f} acc {acc_train:.4f} "
            f"| loss val {loss_val:.4f} acc {acc_val:.4f}"
        )


def test(model, criterion, input, target, mask):
    model.eval()
    with torch.no_grad():
        output = model(*input)
        output, target = output[mask], target[mask]
        loss = criterion(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return loss.item(), acc.item()


torch.manual_seed(42)
features, labels, adj_mat = cora_like(300, 7, 200, torch.Generator().manual_seed(42))
idx = torch.randperm(len(labels))
idx_test, idx_val, idx_train = idx[:100], idx[100:150], idx[150:]
gcn = GCN(features.shape[1], 16, labels.max().item() + 1, False, 0.5)
optimizer = Adam(gcn.parameters(), lr=0.01, weight_decay=5e-4)
criterion = nn.NLLLoss()
for epoch in range(100):
    train_iter(
        epoch + 1, gcn, optimizer, criterion, (features, adj_mat), labels, idx_train, idx_val
    )
loss_test, acc_test = test(gcn, criterion, (features, adj_mat), labels, idx_test)
print(f"Test set results: loss {loss_test:.4f} accuracy {acc_test:.4f}")
