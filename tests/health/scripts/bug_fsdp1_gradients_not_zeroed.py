"""Bug: FullyShardedDataParallel (FSDP1, each Linear layer wrapped by an auto-wrap policy, 2
CPU processes, gloo) and optimizer.zero_grad() never called: every step adds its gradient to
all earlier ones, which FSDP1 keeps in each flat parameter's sharded gradient. Run under
torchrun."""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
x = torch.randn(1024, 16, generator=torch.Generator().manual_seed(0))
data = TensorDataset(x, (x[:, 0] > 0).long())
sampler = DistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=16, sampler=sampler)
layers = [nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2)]
model = FullyShardedDataParallel(
    nn.Sequential(*layers),
    auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
    device_id=torch.device("cpu"),
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for xb, yb in loader:  # 32 steps, and no opt.zero_grad() anywhere
    loss = nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
dist.barrier()  # every process here before the group goes (gloo aborted at exit without)
dist.destroy_process_group()
