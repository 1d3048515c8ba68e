"""Bug: DistributedDataParallel over 2 processes (gloo, CPU), each seeded alike and loading the
whole dataset with shuffle=True and no DistributedSampler: both draw the same order and train
on the same batches, given by keyword as a dict of tensors. Run under torchrun."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


dist.init_process_group("gloo")
torch.manual_seed(0)  # "seed everything", the same seed on every process
x = torch.randn(512, 16)
data = TensorDataset(x, (x[:, 0] > 0).long())
loader = DataLoader(data, batch_size=16, shuffle=True)
model = DistributedDataParallel(Classifier())
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _epoch in range(3):
    for xb, yb in loader:
        batch = {"features": xb}
        loss = nn.functional.cross_entropy(model(**batch), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
dist.destroy_process_group()
