"""Bug: Hogwild training as in PyTorch's mnist_hogwild example (a shared model, each forked
process stepping it with an optimiser of its own, fed by a DataLoader with a worker), with
probabilities fed into cross-entropy. The forked processes train, the script itself does not:
their reports make the script's. Run as a plain script (python bug_hogwild_probs_into_ce.py)."""

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train(rank: int, model: nn.Module) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(1 + rank)
    x = torch.randn(1024, 16)
    loader = DataLoader(
        TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16, shuffle=True, num_workers=1
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _epoch in range(2):
        for xb, yb in loader:
            opt.zero_grad()
            probs = torch.softmax(model(xb), dim=-1)
            loss = nn.functional.cross_entropy(probs, yb)  # the bug: probabilities, not logits
            loss.backward()
            opt.step()


if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    model.share_memory()
    processes = [mp.Process(target=train, args=(rank, model)) for rank in range(2)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    with torch.no_grad():  # the script's own evaluation of the shared model
        x = torch.randn(256, 16)
        accuracy = (model(x).argmax(-1) == (x[:, 0] > 0).long()).float().mean()
    print(f"accuracy {accuracy:.2f}")
