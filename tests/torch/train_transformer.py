"""A few training steps of a small transformer encoder (self-attention, layer norm, dropout,
softmax) on random CPU data. Prints each step's loss as a hex float for bit-for-bit comparisons.
Usage: train_transformer.py [steps]"""
import torch
from training import train


def main():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                             dropout=0.1, batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=2),
                                torch.nn.Flatten(), torch.nn.Linear(32 * 10, 5))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(8, 10, 32)
    y = torch.randint(0, 5, (8,))
    train(model, opt, x, y)


if __name__ == "__main__":
    main()
