"""Two chained float32 matmuls for the error-attribution test (test_torch.py Attribution):
P = A @ B is accurate (relative to its own output) but rounds big + s, C = P @ w then cancels the
big part away, so C's result is wrong both from its own rounding (generated) and from the
rounding already in its input (amplified). Prints C's sum so runs can be compared, and P's
normwise error against its f64 product, computed here, for the producer's input_error."""
import torch

torch.manual_seed(0)
n = 64
big = 1e4 * (1 + torch.rand(n, 1))
s = 1 + torch.rand(n, 1)
a = torch.cat([big, s], dim=1)
b = torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.5, 0.0]])
w = torch.tensor([[1.0], [1.0], [-1.0]])
for step in range(2):
    p = torch.mm(a, b)  # PRODUCER
    c = torch.mm(p, w)  # CONSUMER
    exact = (a.double()[:, :, None] * b.double()[None]).sum(1)  # no aten::mm: not checked
    error = ((p.double() - exact).norm() / exact.norm()).item()
    print(f"step {step} c {c.sum().item():.9g} producer_error {error!r}")
