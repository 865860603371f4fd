"""A few torchvision resnet18 training steps on random CPU data (small images so that it runs in
seconds). Prints each step's loss as a hex float for bit-for-bit comparisons.
Usage: train_resnet.py [steps]"""
import torch
import torchvision
from training import train


def main():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(4, 3, 64, 64)
    y = torch.randint(0, 10, (4,))
    train(model, opt, x, y)


if __name__ == "__main__":
    main()
