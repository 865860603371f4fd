"""Training over a DataLoader with a forked worker per epoch (PyTorch's default on Linux), for
the tests of what a forked child inherits from fumi's state (test_torch.py TorchAdapter).

Epoch 0 trains three steps and ends with a one-element tensor that holds NaN from the data (a
NaN search starts: the value came in, no op made it); epoch 1 forks a new worker while that
search runs and trains three more steps. Prints one loss per step."""
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
data = TensorDataset(torch.randn(48, 8), torch.randint(0, 2, (48,)))
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(data, batch_size=16, num_workers=1)
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print(f"epoch {epoch} loss {loss.item().hex()}", flush=True)
    if epoch == 0:
        recorded = torch.tensor([float("nan")])  # a value from outside, held in one element
        print("metric", (recorded * 2).isnan().item(), flush=True)
