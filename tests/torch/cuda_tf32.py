"""f32 convolutions (forward, transposed, backward) and a linear layer on a CUDA device, with
torch's TF32 settings as given on the command line, for fumi's OnCuda tests. Prints a hash of
the results so runs with and without fumi compare bit for bit (deterministic algorithms).
Usage: cuda_tf32.py CONV_TF32(0|1) MATMUL_TF32(0|1)"""
import hashlib
import os
import sys

os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # deterministic cuBLAS: runs compare
import torch  # noqa: E402

torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.allow_tf32 = sys.argv[1] == "1"
torch.backends.cuda.matmul.allow_tf32 = sys.argv[2] == "1"
torch.manual_seed(0)
dev = "cuda"
conv = torch.nn.Conv2d(64, 128, 3, padding=1).to(dev)
up = torch.nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1, bias=False).to(dev)
fc = torch.nn.Linear(512, 256).to(dev)
x = torch.randn(16, 64, 16, 16, device=dev, requires_grad=True)
y = up(torch.relu(conv(x)))
z = fc(torch.randn(64, 512, device=dev))
(y.square().mean() + z.square().mean()).backward()
h = hashlib.sha256()
for t in (y, z, x.grad, conv.weight.grad, up.weight.grad):
    h.update(t.detach().cpu().numpy().tobytes())
print("hash", h.hexdigest())
