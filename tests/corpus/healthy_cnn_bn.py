"""Healthy: small CNN (Conv2d + BatchNorm2d + ReLU + pooling + Linear), cross-entropy,
SGD with momentum, a few steps on synthetic 1x24x24 images.

As in most CNN code, the convolutions keep their bias although BatchNorm follows: the exact
gradient of such a bias is 0 (BatchNorm removes the per-channel mean), so the bias output of
aten::convolution_backward is pure rounding noise of a cancelling sum. That is healthy and
common; a checker must not call it an error."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import forward_ctx, report, setup


class Net(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.b2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 6 * 6, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        x = F.avg_pool2d(F.relu(self.b2(self.c2(x))), 2)
        return self.fc(x.flatten(1))


def main():
    setup(1)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    # Five classes, each a fixed pattern plus noise.
    protos = torch.randn(5, 1, 24, 24)
    losses = []
    for _ in range(6):
        y = torch.randint(0, 5, (32,))
        x = protos[y] + 0.3 * torch.randn(32, 1, 24, 24)
        with forward_ctx():
            logits = net(x)
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    report("healthy_cnn_bn", losses)


if __name__ == "__main__":
    main()
