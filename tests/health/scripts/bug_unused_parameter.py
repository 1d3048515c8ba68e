"""Bug: a projection layer is built but forward uses the wrong attribute, so it never trains."""

import torch
from torch import nn

torch.manual_seed(0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(16, 32)
        self.projection = nn.Linear(32, 32)
        self.classifier = nn.Linear(32, 3)

    def forward(self, x):
        h = torch.relu(self.encoder(x))
        return self.classifier(h)  # bug: self.projection(h) was meant to be in between


model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(150):  # past the 100-step window: the next step is watched too
    x = torch.randn(32, 16)
    loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
